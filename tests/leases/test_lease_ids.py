"""Lease ids: unguessable, URL-safe, the shape the API documents, never handed out twice."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from multiprocessing.connection import Connection

import pytest

from egress_proxies.leases import lease
from egress_proxies.leases.lease import new_lease_id, parse_lease_id

pytestmark = pytest.mark.unit


def test_ids_have_the_documented_shape_and_do_not_repeat_across_batches() -> None:
    ids = [new_lease_id() for _ in range(10 * lease._ID_BATCH + 7)]
    assert all(parse_lease_id(lease_id) == lease_id for lease_id in ids)
    assert len(set(ids)) == len(ids)
    # Every URL-safe character is used, none far more than its share (random, not a counter).
    characters = Counter("".join(ids))
    assert len(characters) == 64
    share = sum(characters.values()) / 64
    assert 0.8 * share < min(characters.values()) <= max(characters.values()) < 1.2 * share


def _send_ids(conn: Connection) -> None:
    conn.send([new_lease_id() for _ in range(4)])


def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    new_lease_id()  # the batch is made, most of it unused
    unused = list(lease._unused_ids)
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(target=_send_ids, args=(theirs,))
    child.start()
    from_child = ours.recv()
    child.join(timeout=10)
    assert child.exitcode == 0
    assert not set(from_child) & set(unused)
