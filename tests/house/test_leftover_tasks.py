"""The autouse `no_leftover_tasks` fixture fails a test that leaves a task running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

LEAKY = """
import asyncio

import pytest


async def test_leaks() -> None:
    asyncio.get_running_loop().create_task(asyncio.sleep(3600), name="forgotten")


async def test_cleans_up() -> None:
    task = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
    task.cancel()


@pytest.mark.leaves_tasks("this one says why")
async def test_opted_out() -> None:
    asyncio.get_running_loop().create_task(asyncio.sleep(3600), name="allowed")
"""

CONFTEST = "from tests.conftest import no_leftover_tasks  # noqa: F401\n"


def test_a_leftover_task_fails_only_the_test_that_left_it(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    root = Path(__file__).resolve().parents[2]
    # The project's pytest settings (asyncio mode, markers), the leaky tests' directory.
    settings = ["-c", "pyproject.toml", "--rootdir", str(tmp_path)]
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *settings, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
        timeout=120,
    )
    assert "test_leaks" in ran.stdout and "forgotten" in ran.stdout, ran.stdout
    # test_leaks itself passes, then its teardown errors; the other two are clean.
    assert "3 passed, 1 error" in ran.stdout, ran.stdout
