"""Kubernetes objects are addressed by type: a check `make lint` runs.

Every API path comes from `egress_proxies/kube/resources.py`, and a missing
or conflicting object is caught as `NotFoundError` / `ConflictError`, not by
comparing `.status` with 404 or 409. This walks the syntax trees of the
package, the harness and the benchmarks and names each place that does
otherwise.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("egress_proxies", "harness", "bench")
PATH_BUILDER = ROOT / "egress_proxies" / "kube" / "resources.py"
TYPED_STATUSES = {404: "NotFoundError", 409: "ConflictError"}


def sources() -> Iterator[Path]:
    for folder in CHECKED:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _leading_text(node: ast.expr) -> str | None:
    """The text a string or f-string starts with (None for anything else)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _leading_text(node.values[0])
    return None


def _numbers(node: ast.expr) -> set[object]:
    if isinstance(node, ast.Constant):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {element.value for element in node.elts if isinstance(element, ast.Constant)}
    return set()


def _compares_status(node: ast.Compare) -> set[int]:
    operands = [node.left, *node.comparators]
    if not any(isinstance(o, ast.Attribute) and o.attr == "status" for o in operands):
        return set()
    compared = set().union(*(_numbers(o) for o in operands))
    return {status for status in TYPED_STATUSES if status in compared}


def violations(path: Path) -> list[str]:
    found = []
    where = path.relative_to(ROOT)
    nodes = list(ast.walk(ast.parse(path.read_text(), str(path))))
    # The parts of an f-string are strings too; the f-string is judged as a whole.
    parts = {id(part) for node in nodes if isinstance(node, ast.JoinedStr) for part in node.values}
    for node in nodes:
        if not isinstance(node, ast.expr):
            continue
        text = _leading_text(node)
        if (
            text is not None
            and text.startswith(("/api/", "/apis/"))
            and id(node) not in parts
            and path != PATH_BUILDER
        ):
            found.append(f"{where}:{node.lineno}: an API path spelled out: use kube.resources")
        if isinstance(node, ast.Compare):
            for status in sorted(_compares_status(node)):
                found.append(
                    f"{where}:{node.lineno}: .status compared with {status}: "
                    f"catch kube.{TYPED_STATUSES[status]}"
                )
    return found


def test_api_paths_come_from_the_path_builder_and_errors_are_caught_by_type() -> None:
    checked = list(sources())
    assert len(checked) > 50, checked  # the walk found the tree
    assert [line for path in checked for line in violations(path)] == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('path = f"/api/v1/namespaces/{ns}/pods"', ["an API path spelled out"]),
        ('client.get("/apis/kopf.dev/v1/clusterkopfpeerings")', ["an API path spelled out"]),
        ("if error.status == 404: pass", [".status compared with 404"]),
        ("if error.status not in (404, 409): raise", ["with 404", "with 409"]),
        ('client.get_text("/readyz"); ok = response.status == 200', []),
    ],
)
def test_the_check_names_what_it_is_meant_to_catch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: list[str]
) -> None:
    monkeypatch.setattr("tests.kube.test_kube_addressing.ROOT", tmp_path)
    module = tmp_path / "module.py"
    module.write_text(source + "\n")
    found = violations(module)
    assert len(found) == len(expected), found
    assert all(part in line for part, line in zip(expected, found, strict=True)), found
