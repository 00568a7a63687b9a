"""Every library the package imports is declared in pyproject.toml, not only pulled in."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """The distributions `[project] dependencies` names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = (re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec) for spec in project["dependencies"])
    return {_normal(name.group()) for name in names if name}


def imported() -> set[str]:
    """The top-level modules outside the standard library that egress_proxies imports."""
    found: set[str] = set()
    for path in (ROOT / "egress_proxies").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking_only(node):
                node.body = []  # imported for mypy only (stubs): never at run time
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return found - set(sys.stdlib_module_names) - {"egress_proxies"}


def _type_checking_only(node: ast.If) -> bool:
    """An `if TYPE_CHECKING:` block."""
    test = node.test
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def test_every_imported_library_is_a_declared_dependency() -> None:
    providers = importlib.metadata.packages_distributions()
    dependencies = declared()
    undeclared = {
        module: providers.get(module)
        for module in imported()
        # A namespace package (google, opentelemetry) is covered by any one of its distributions.
        if not dependencies & {_normal(name) for name in providers.get(module, [])}
    }
    assert undeclared == {}
