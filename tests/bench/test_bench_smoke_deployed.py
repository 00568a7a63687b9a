"""Every benchmark that deploys the operator cluster-wide, in its tiny mode, on a dev cluster
of its own (apart from the session's, so this module can run on any worker).

Each must complete and print every figure it promises; no speed is asserted.
"""

from __future__ import annotations

import pytest

from tests.benchmarks import DEPLOYED, check_smoke

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", DEPLOYED)
def test_benchmark_runs_in_its_smoke_mode_on_a_cluster_of_its_own(name: str) -> None:
    check_smoke(name)
