"""Time is one seam: only `clock.py` reads the clock, waits, or writes a Kubernetes timestamp.

Everything else takes a `Clock` from its composition root (so tests run it on
`ManualClock`) and formats or parses Kubernetes timestamps with
`k8s_time`/`k8s_micro_time`/`parse_k8s_time`. The few exceptions are listed
below with the reason each is not the operator's notion of now.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import egress_proxies

pytestmark = pytest.mark.unit

PACKAGE = Path(egress_proxies.__file__).parent
SEAM = PACKAGE / "clock.py"

# (module, attribute) pairs that read the time of day, read a monotonic clock, or wait.
CLOCK_CALLS = {
    ("time", "time"),
    ("time", "monotonic"),
    ("time", "sleep"),
    ("asyncio", "sleep"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
}
# Calls that schedule on the event loop's own clock, and the Kubernetes timestamp formatting.
ANY_RECEIVER = {"call_later", "call_at", "strftime", "fromisoformat"}

# Relative path (or package folder) -> the calls it may make, and why.
ALLOWED: dict[str, tuple[set[str], str]] = {
    "devcluster/": (
        {"time.monotonic", "time.sleep", "asyncio.sleep", "datetime.now"},
        "the dev cluster waits for real processes and signs real certificates",
    ),
    "stacks/operations.py": (
        {"datetime.now"},
        "the stand-in update summary in the stack worker process, where no Clock is",
    ),
    "telemetry/probe_metrics.py": (
        {"time.time"},
        "a series' `_created` sample, the wall time prometheus_client stamps its own with",
    ),
    "providers/gcp.py": (
        {"datetime.fromisoformat"},
        "a GCE creationTimestamp: Compute's RFC 3339, not a Kubernetes timestamp",
    ),
}


def clock_uses(path: Path) -> list[tuple[int, str]]:
    """Each clock read, wait, loop timer or timestamp format in one module: (line, call)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute):
            base = node.value
            owner = (
                base.id
                if isinstance(base, ast.Name)
                else base.attr
                if isinstance(base, ast.Attribute)
                else "<expression>"
            )
            if (owner, node.attr) in CLOCK_CALLS or node.attr in ANY_RECEIVER:
                found.append((node.lineno, f"{owner}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "asyncio"):
            found += [
                (node.lineno, f"{node.module}.{alias.name}")
                for alias in node.names
                if (node.module, alias.name) in CLOCK_CALLS
            ]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "%Y-%m-%dT" in node.value
        ):
            found.append((node.lineno, "a timestamp format"))
    return found


def allowed(relative: str, call: str) -> bool:
    return any(
        (relative == where or (where.endswith("/") and relative.startswith(where)))
        and call in calls
        for where, (calls, _) in ALLOWED.items()
    )


def test_only_the_clock_module_reads_time_waits_or_writes_kubernetes_timestamps() -> None:
    stray = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {call}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != SEAM
        for line, call in clock_uses(path)
        if not allowed(path.relative_to(PACKAGE).as_posix(), call)
    ]
    assert stray == [], "take a Clock, or use k8s_time/parse_k8s_time (egress_proxies/clock.py)"


def test_the_check_sees_what_it_forbids(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text(
        "import asyncio, time\n"
        "from datetime import datetime\n"
        "from time import monotonic\n"
        "async def f(loop):\n"
        "    time.time()\n"
        "    datetime.now()\n"
        "    await asyncio.sleep(1)\n"
        "    loop.call_later(1, print)\n"
        "    datetime.fromisoformat('x').strftime('%Y-%m-%dT%H')\n"
    )
    assert sorted(clock_uses(module)) == [
        (3, "time.monotonic"),
        (5, "time.time"),
        (6, "datetime.now"),
        (7, "asyncio.sleep"),
        (8, "loop.call_later"),
        (9, "<expression>.strftime"),
        (9, "a timestamp format"),
        (9, "datetime.fromisoformat"),
    ]


def test_every_allowance_is_still_needed() -> None:
    used = {
        (where, call)
        for path in PACKAGE.rglob("*.py")
        for _, call in clock_uses(path)
        for where in ALLOWED
        if path.relative_to(PACKAGE).as_posix().startswith(where)
    }
    unused = [
        f"{where}: {call}"
        for where, (calls, _) in ALLOWED.items()
        for call in calls
        if (where, call) not in used
    ]
    assert unused == []
