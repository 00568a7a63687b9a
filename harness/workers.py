"""The suite in pytest-xdist workers: the dev cluster's modules in one worker, the rest beside it.

`make test` runs `pytest -n 2 --dist loadscope`. Each test module is one unit
of work, so its module-scoped fixtures start once, as with xdist's own
`loadscope`; and every module with a test on the session's dev cluster
(`dev_cluster` in its fixture closure) is one unit together, so a single
worker starts the one cluster and runs those modules in collection order while
the other worker takes the modules that need no cluster (unit, client,
loopback integration, and the deploy tests that start a cluster of their own).

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
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

GROUPS_VARIABLE = "EGRESS_PROXIES_TEST_GROUPS"
CLUSTER_GROUP = "dev-cluster"


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


# xdist ships no py.typed, so to mypy its scheduler is Any.
class ClusterScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """`loadscope` by module, with every module on the dev cluster in one unit of work."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._cluster_modules: frozenset[str] | None = None

    def __repr__(self) -> str:
        known = "unread" if self._cluster_modules is None else len(self._cluster_modules)
        return f"<ClusterScheduling [cluster modules: {known}]>"

    def _split_scope(self, nodeid: str) -> str:
        module = module_of(nodeid)
        return CLUSTER_GROUP if module in self.cluster_modules() else module

    def cluster_modules(self) -> frozenset[str]:
        """The modules the workers found on the dev cluster (read once, after collection)."""
        if self._cluster_modules is None:
            directory = Path(os.environ.get(GROUPS_VARIABLE, "/nonexistent"))
            found: set[str] = set()
            for path in sorted(directory.glob("*.json")):
                found.update(json.loads(path.read_text()))
            self._cluster_modules = frozenset(found)
        return self._cluster_modules


def make_scheduler(config: pytest.Config, log: Producer) -> ClusterScheduling | None:
    """The scheduler for `--dist loadscope`; None leaves the other modes to xdist."""
    if config.getoption("dist", "no") != "loadscope":
        return None
    return ClusterScheduling(config, log)
