"""One live operator per state dir, and a peer name that survives restarts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import egress_proxies
from egress_proxies.operator.state_dir import StateDirBusyError, StateDirClaim

pytestmark = pytest.mark.unit

HOLD = """
import sys, time
from pathlib import Path
from egress_proxies.operator.state_dir import StateDirClaim
StateDirClaim.acquire(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_claim_is_refused_while_the_first_is_held(tmp_path: Path) -> None:
    first = StateDirClaim.acquire(tmp_path / "state")
    with pytest.raises(StateDirBusyError, match=r"another operator \(pid \d+\) is using"):
        StateDirClaim.acquire(tmp_path / "state")
    first.release()
    StateDirClaim.acquire(tmp_path / "state").release()


def test_a_killed_holder_leaves_the_state_dir_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateDirBusyError, match=f"pid {holder.pid}"):
            StateDirClaim.acquire(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    StateDirClaim.acquire(tmp_path).release()


def test_the_peer_identity_is_made_once_and_kept(tmp_path: Path) -> None:
    claim = StateDirClaim.acquire(tmp_path)
    identity = claim.peer_identity()
    claim.release()
    again = StateDirClaim.acquire(tmp_path)
    assert again.peer_identity() == identity
    assert "@" in identity
    assert StateDirClaim.acquire(tmp_path / "other").peer_identity() != identity


IDENTITY = """
import sys
from pathlib import Path
from egress_proxies.operator.state_dir import StateDirClaim
print(StateDirClaim.acquire(Path(sys.argv[1])).peer_identity())
"""


def test_a_user_without_a_passwd_entry_gets_a_peer_identity() -> None:
    # As the operator image runs: uid 65532, no /etc/passwd entry, no USER or LOGNAME.
    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory)
        state.chmod(0o777)
        identity = _identity_as_an_unlisted_user(state)
    assert identity.startswith("65532@")


def _identity_as_an_unlisted_user(state: Path) -> str:
    # The unlisted user may not read this checkout (a clone in a 0700 directory): it
    # runs the base interpreter on a copy of the package it imports (stdlib only else).
    with tempfile.TemporaryDirectory() as code:
        Path(code).chmod(0o755)
        shutil.copytree(
            Path(egress_proxies.__file__).parent,
            Path(code) / "egress_proxies",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        done = subprocess.run(
            [
                "/usr/bin/setpriv",
                "--reuid=65532",
                "--regid=65532",
                "--clear-groups",
                os.path.realpath(sys.executable),
                "-c",
                IDENTITY,
                str(state),
            ],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": code},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return done.stdout
