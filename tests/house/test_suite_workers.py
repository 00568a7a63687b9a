"""`make test`'s workers: the dev cluster's modules split into one balanced group per worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.workers import (
    CLUSTER_GROUP,
    DEFAULT_SECONDS,
    measured_seconds,
    module_of,
    module_seconds,
    next_scope,
    split,
)

pytestmark = pytest.mark.unit


def test_the_longest_modules_go_first_each_to_the_lightest_group() -> None:
    seconds = {"a.py": 300.0, "b.py": 200.0, "c.py": 150.0, "d.py": 100.0}

    groups = split(seconds, seconds, 2)

    assert groups == {"a.py": 0, "b.py": 1, "c.py": 1, "d.py": 0}


def test_an_unmeasured_module_counts_the_default() -> None:
    groups = split(["new.py", "old.py"], {"old.py": DEFAULT_SECONDS + 1}, 2)

    assert groups == {"old.py": 0, "new.py": 1}


def test_one_worker_takes_every_module() -> None:
    assert set(split(["a.py", "b.py"], {}, 1).values()) == {0}


def test_the_split_does_not_depend_on_the_order_modules_arrive_in() -> None:
    seconds = {f"m{index}.py": float(index % 7) for index in range(20)}

    assert split(sorted(seconds), seconds, 2) == split(sorted(seconds, reverse=True), seconds, 2)


def test_a_report_gives_seconds_per_module_and_a_failed_test_its_modules_median(
    tmp_path: Path,
) -> None:
    report = tmp_path / "run.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.pools.test_a" name="t1" time="10"/>'
        '<testcase classname="tests.pools.test_a" name="t2" time="20"/>'
        '<testcase classname="tests.pools.test_a" name="t3" time="300"><failure/></testcase>'
        '<testcase classname="tests.proxies.test_b" name="t1" time="1.5"/>'
        "</testsuite></testsuites>"
    )

    assert module_seconds(report) == {"tests/pools/test_a.py": 50.0, "tests/proxies/test_b.py": 1.5}


def test_the_checked_in_durations_name_modules_that_exist() -> None:
    root = Path(__file__).resolve().parents[2]
    measured = measured_seconds()

    assert measured, "harness/durations.json is missing or empty"
    missing = [module for module in measured if not (root / module).exists()]
    assert len(missing) <= len(measured) // 10, f"refresh harness/durations.json: {missing}"


def test_a_node_id_names_its_module() -> None:
    assert module_of("tests/pools/test_a.py::test_x[a::b]") == "tests/pools/test_a.py"


def test_a_worker_takes_its_own_cluster_group_first() -> None:
    own, other = f"{CLUSTER_GROUP}-1", f"{CLUSTER_GROUP}-0"
    seconds = {"long.py": 900.0, own: 10.0, other: 2000.0}

    assert next_scope(["long.py", other, own], own, seconds) == own


def test_then_the_longest_module_and_never_another_workers_group_while_one_is_left() -> None:
    other = f"{CLUSTER_GROUP}-0"
    seconds = {"a.py": 5.0, "b.py": 300.0, "c.py": 40.0, other: 2000.0}

    assert next_scope(["a.py", other, "b.py", "c.py"], f"{CLUSTER_GROUP}-2", seconds) == "b.py"
    assert next_scope([other], f"{CLUSTER_GROUP}-2", seconds) == other


def test_an_unmeasured_module_counts_the_default_when_choosing() -> None:
    seconds = {"short.py": DEFAULT_SECONDS - 1, "long.py": DEFAULT_SECONDS + 1}

    assert next_scope(["short.py", "new.py"], "none", seconds) == "new.py"
    assert next_scope(["new.py", "long.py"], "none", seconds) == "long.py"
