"""The client's sync face is generated from its async one, and the checked-in copy is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.client

SCRIPT = Path(__file__).resolve().parents[2] / "clients" / "python" / "scripts" / "generate_sync.py"


def test_the_checked_in_sync_face_is_what_the_generator_writes() -> None:
    check = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr


def test_the_two_faces_offer_the_same_methods() -> None:
    from egress_proxies_client import AsyncLease, AsyncPool, Lease, Pool  # noqa: PLC0415

    def public(kind: type) -> set[str]:
        return {name for name in vars(kind) if not name.startswith("_")}

    assert public(Pool) - {"close"} == public(AsyncPool) - {"aclose"}
    assert public(Lease) == public(AsyncLease)
