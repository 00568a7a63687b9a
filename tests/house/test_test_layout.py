"""The tests' own layout: grouped by concept, one name per test module."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


def test_every_test_module_lives_in_a_concept_directory() -> None:
    assert sorted(path.name for path in TESTS.glob("test_*.py")) == []
    for path in TESTS.rglob("test_*.py"):
        assert path.parent.parent == TESTS, f"{path}: one level under tests/, by concept"
