"""Every benchmark that runs without the operator, in its tiny mode: it completes and reports.

No speed is asserted: a broken benchmark fails here, a slow one does not.
"""

from __future__ import annotations

import pytest

from harness.cluster import ClusterHandle
from tests.benchmarks import (
    DEPLOYED,
    ON_THE_CLUSTER,
    WITH_THE_OPERATOR,
    WITHOUT_CLUSTER,
    benchmarks,
    check_smoke,
)

pytestmark = pytest.mark.integration


def test_every_benchmark_has_a_smoke_test() -> None:
    assert benchmarks() == {*WITHOUT_CLUSTER, *ON_THE_CLUSTER, *WITH_THE_OPERATOR, *DEPLOYED}


@pytest.mark.parametrize("name", WITHOUT_CLUSTER)
def test_benchmark_runs_in_its_smoke_mode(name: str) -> None:
    check_smoke(name)


@pytest.mark.parametrize("name", ON_THE_CLUSTER)
def test_benchmark_runs_on_the_session_cluster(name: str, dev_cluster: ClusterHandle) -> None:
    check_smoke(name, "--cluster", str(dev_cluster.layout.root))
