"""Discovery tokens from a mounted Secret directory: loaded, rotated, and kept when broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.discovery.token_files import TokenDirectory

pytestmark = pytest.mark.unit

TOKEN_A = "a" * 20
TOKEN_B = "b" * 20


def test_tokens_are_read_and_rotation_applies_after_a_second(tmp_path: Path) -> None:
    clock = ManualClock()
    (tmp_path / "old").write_text(TOKEN_A + "\n")
    (tmp_path / "..data").mkdir()  # kubelet bookkeeping is ignored
    tokens = TokenDirectory(tmp_path, clock)
    assert tokens() == frozenset({TOKEN_A})
    (tmp_path / "new").write_text(TOKEN_B)
    assert tokens() == frozenset({TOKEN_A}), "re-checked at most once per second"
    clock.advance(1.5)
    assert tokens() == frozenset({TOKEN_A, TOKEN_B})
    (tmp_path / "old").unlink()
    clock.advance(1.5)
    assert tokens() == frozenset({TOKEN_B})


def test_a_broken_file_keeps_the_last_good_tokens(tmp_path: Path) -> None:
    clock = ManualClock()
    (tmp_path / "good").write_text(TOKEN_A)
    tokens = TokenDirectory(tmp_path, clock)
    assert tokens() == frozenset({TOKEN_A})
    (tmp_path / "short").write_text("tiny")
    clock.advance(2.0)
    assert tokens() == frozenset({TOKEN_A})


def test_an_empty_directory_has_no_tokens(tmp_path: Path) -> None:
    assert TokenDirectory(tmp_path, ManualClock())() == frozenset()
