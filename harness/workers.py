"""The suite in pytest-xdist workers, each with a dev cluster of its own and a share of its modules.

`make test` runs `pytest -n 3 --dist loadscope`. Each test module is one unit
of work, so its module-scoped fixtures start once, as with xdist's own
`loadscope`. The modules with a test on the session's dev cluster
(`dev_cluster` in a test's fixture closure) are split into one group per
worker, balanced by the seconds each module took in a measured run
(`durations.json`, refreshed with `python -m harness.workers JUNIT_XML`; a
module it does not know counts `DEFAULT_SECONDS`). Worker N takes group N
first and starts its cluster for it, then the workers share the modules
that need no cluster (unit, client, loopback integration, and the deploy tests
that start a cluster of their own), the longest first by the same measure, each
to the first worker free (a worker gets its next module only when it has one
test left, the one it holds until it knows what comes next). Tests on one
cluster run one at a time, in collection order, as in a serial run.

xdist's `--dist loadgroup` would do the grouping from `xdist_group` marks, but
it carries the group in the node id, which pytest 9 no longer lets a plugin
change (pytest-xdist issue 1386: the marks are silently ignored). So the
workers write down which modules use the cluster, into a directory the
controller names in `EGRESS_PROXIES_TEST_GROUPS` before it starts them (they
inherit its environment), and the controller's scheduler reads it once every
worker has collected.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from xml.etree import ElementTree

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

GROUPS_VARIABLE = "EGRESS_PROXIES_TEST_GROUPS"
CLUSTER_GROUP = "dev-cluster"
DURATIONS = Path(__file__).with_name("durations.json")
DEFAULT_SECONDS = 20.0


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (it has the controller's `workerinput`)."""
    return hasattr(config, "workerinput")


def start_controller(config: pytest.Config) -> None:
    """In the controller of a `--dist loadscope` run: name the directory the workers write to."""
    if is_worker(config) or config.getoption("dist", "no") != "loadscope":
        return
    os.environ[GROUPS_VARIABLE] = tempfile.mkdtemp(prefix="egress-proxies-test-groups-")


def stop_controller(config: pytest.Config) -> None:
    """Remove the controller's directory."""
    if not is_worker(config) and GROUPS_VARIABLE in os.environ:
        shutil.rmtree(os.environ.pop(GROUPS_VARIABLE), ignore_errors=True)


def record_cluster_modules(config: pytest.Config, items: Iterable[pytest.Item]) -> None:
    """In a worker: write down the modules whose tests use the session's dev cluster."""
    directory = os.environ.get(GROUPS_VARIABLE)
    if not is_worker(config) or not directory:
        return
    modules = sorted({module_of(item.nodeid) for item in items if "dev_cluster" in _fixtures(item)})
    worker = config.workerinput["workerid"]  # type: ignore[attr-defined]
    target = Path(directory) / f"{worker}.json"
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(modules))
    partial.replace(target)


def module_of(nodeid: str) -> str:
    """The module part of a node id: `tests/pools/test_x.py` of `tests/pools/test_x.py::test_y`."""
    return nodeid.split("::", 1)[0]


def _fixtures(item: pytest.Item) -> tuple[str, ...]:
    return tuple(getattr(item, "fixturenames", ()))


def split(modules: Iterable[str], seconds: Mapping[str, float], groups: int) -> dict[str, int]:
    """Each module's group (0 .. groups-1): the longest first, each to the lightest group so far."""
    load = [0.0] * groups
    chosen = {}
    for module in sorted(modules, key=lambda m: (-seconds.get(m, DEFAULT_SECONDS), m)):
        group = min(range(groups), key=lambda index: (load[index], index))
        chosen[module] = group
        load[group] += seconds.get(module, DEFAULT_SECONDS)
    return chosen


def next_scope(queued: Sequence[str], own: str, seconds: Mapping[str, float]) -> str:
    """The unit a worker takes next: its own cluster group, else the longest unit that is not
    another worker's group (ties in queue order), else the first left."""
    if own in queued:
        return own
    free = [scope for scope in queued if not scope.startswith(f"{CLUSTER_GROUP}-")]
    if not free:
        return queued[0]
    return max(free, key=lambda scope: seconds.get(scope, DEFAULT_SECONDS))


def measured_seconds() -> dict[str, float]:
    """The seconds per module of the last measured run (`durations.json`); empty if none."""
    try:
        loaded = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(module): float(value) for module, value in loaded.items()}


# xdist ships no py.typed, so to mypy its scheduler is Any.
class ClusterScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """`loadscope` by module; the dev cluster's modules in one group per worker, taken first."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._groups: dict[str, int] | None = None
        self._seconds: dict[str, float] = {}  # measured, per module

    def __repr__(self) -> str:
        known = "unread" if self._groups is None else len(self._groups)
        return f"<ClusterScheduling [cluster modules: {known}]>"

    def _split_scope(self, nodeid: str) -> str:
        module = module_of(nodeid)
        group = self.cluster_groups().get(module)
        return module if group is None else f"{CLUSTER_GROUP}-{group}"

    def _assign_work_unit(self, node: object) -> None:
        own = f"{CLUSTER_GROUP}-{self.nodes.index(node)}"
        chosen = next_scope(list(self.workqueue), own, self._seconds)
        self.workqueue.move_to_end(chosen, last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: object) -> None:
        # xdist's heuristic hands out the next unit with two tests left; a long one would
        # then be queued behind a long test while another worker sits idle.
        if self.workqueue and self._pending_of(self.assigned_work.get(node, {})) > 1:
            return
        super()._reschedule(node)

    def cluster_groups(self) -> dict[str, int]:
        """The dev cluster's modules, each with its group (read once, after collection)."""
        if self._groups is None:
            directory = Path(os.environ.get(GROUPS_VARIABLE, "/nonexistent"))
            found: set[str] = set()
            for path in sorted(directory.glob("*.json")):
                found.update(json.loads(path.read_text()))
            self._seconds = measured_seconds()
            self._groups = split(found, self._seconds, max(1, len(self.nodes)))
        return self._groups


def module_seconds(junit_xml: Path) -> dict[str, float]:
    """Seconds per test module from a JUnit XML report; a failed test counts its module's median."""
    times: dict[str, list[tuple[float, bool]]] = {}
    # The report is pytest's own, written on this machine.
    for case in ElementTree.parse(junit_xml).iter("testcase"):  # noqa: S314
        module = str(case.get("classname", "")).replace(".", "/") + ".py"
        failed = case.find("failure") is not None or case.find("error") is not None
        times.setdefault(module, []).append((float(case.get("time", 0)), failed))
    totals: dict[str, float] = {}
    for module, cases in times.items():
        passed = sorted(seconds for seconds, failed in cases if not failed)
        median = passed[len(passed) // 2] if passed else DEFAULT_SECONDS
        totals[module] = round(sum(median if failed else s for s, failed in cases), 1)
    return dict(sorted(totals.items()))


def main(argv: Sequence[str]) -> int:
    """`python -m harness.workers JUNIT_XML`: write `durations.json` from a run's report."""
    if len(argv) != 1:
        print(
            "usage: python -m harness.workers JUNIT_XML  (pytest --junitxml=...)", file=sys.stderr
        )
        return 2
    DURATIONS.write_text(json.dumps(module_seconds(Path(argv[0])), indent=0) + "\n")
    print(f"wrote {DURATIONS}")
    return 0


def make_scheduler(config: pytest.Config, log: Producer) -> ClusterScheduling | None:
    """The scheduler for `--dist loadscope`; None leaves the other modes to xdist."""
    if config.getoption("dist", "no") != "loadscope":
        return None
    return ClusterScheduling(config, log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
