"""Running a benchmark in its tiny mode (`--smoke`): it must finish and print every figure."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import bench
from egress_proxies import toolchain

REPOSITORY = Path(__file__).resolve().parent.parent
# Every benchmark, by what its smoke run needs; tests/bench/test_bench_smoke_*.py run them.
WITHOUT_CLUSTER = ("broad_crawl", "gc", "health", "leases", "console", "lease_credentials")
ON_THE_CLUSTER = ("tier",)
WITH_THE_OPERATOR = ("reconcile", "pools", "memory", "crawl", "backends")
# Deploys an operator that watches every namespace: a cluster of its own, not the session's.
DEPLOYED = ("failover",)
SMOKE_TIMEOUT_SECONDS = 900.0


def benchmarks() -> set[str]:
    """The modules of `bench/` that are benchmarks (they have a `main`), not helpers."""
    return {
        module.name
        for module in pkgutil.iter_modules(bench.__path__)
        if hasattr(importlib.import_module(f"bench.{module.name}"), "main")
    }


def run_smoke(name: str, *args: str) -> str:
    """`python -m bench.<name> --smoke` from this checkout; its stdout, once it exited 0."""
    result = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--smoke", *args],
        cwd=REPOSITORY,
        env=toolchain.environment_with_tools(),
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_SECONDS,
        check=False,
    )
    assert result.returncode == 0, (
        f"bench.{name} --smoke exited {result.returncode}:\n{result.stdout[-3000:]}\n"
        f"{result.stderr[-5000:]}"
    )
    return result.stdout


def missing_figures(output: str, figures: Sequence[str]) -> list[str]:
    """The figures no line of `output` names and gives a number for."""
    return [figure for figure in figures if not re.search(re.escape(figure) + r".*\d", output)]


def check_smoke(name: str, *args: str) -> None:
    """Run the benchmark's tiny mode; fail unless it printed every figure it promises."""
    output = run_smoke(name, *args)
    figures: Sequence[str] = importlib.import_module(f"bench.{name}").FIGURES
    missing = missing_figures(output, figures)
    assert not missing, f"bench.{name} --smoke printed no {missing}:\n{output}"
