"""Every benchmark that runs the operator, in its tiny mode, on the session's dev cluster
(the one that deploys it cluster-wide: test_bench_smoke_deployed.py).

Each must complete and print every figure it promises (bench.reconcile's and
bench.pools's CPU split by process among them); no speed is asserted.
"""

from __future__ import annotations

import pytest

from harness.cluster import ClusterHandle
from tests.benchmarks import WITH_THE_OPERATOR, check_smoke

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", WITH_THE_OPERATOR)
def test_benchmark_runs_in_its_smoke_mode(name: str, dev_cluster: ClusterHandle) -> None:
    check_smoke(name, "--cluster", str(dev_cluster.layout.root))
