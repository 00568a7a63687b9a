"""The product reads its environment through the settings package only (`make lint` runs this).

Options come from the settings models and the other variables from the
mapping `settings.process_environment()` hands the composition roots. The
modules below touch `os.environ` for a reason no mapping serves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "egress_proxies"

ALLOWED = {
    # The one entry point: the models' variables, the process environment, TRACEPARENT dropped.
    "settings/environment.py",
    # The toolchain cache ($EGRESS_PROXIES_CACHE, shared with tools/build.sh) and the
    # environment of the tools it runs.
    "toolchain.py",
    # The environment a child process inherits: the stack worker, pulumi, an exec plugin.
    "stacks/worker.py",
    "stacks/operations.py",
    # $KUBECONFIG as kubectl reads it when no kubeconfig is given.
    "kube/config.py",
    # The stack worker process logs as the operator does; importing the settings models
    # (pydantic-settings, the discovery API) would cost the worker about 2 MiB.
    "operator/stack_worker.py",
}
READS = {"environ", "environb", "getenv", "getenvb"}


def environment_reads(path: Path) -> list[str]:
    """Each `os.environ`, `os.getenv` or `from os import environ` in `path`, as `line: code`."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in READS
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in READS for alias in node.names)
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_allowed_modules_read_the_environment() -> None:
    offending = {
        str(path.relative_to(PACKAGE)): reads
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in ALLOWED and (reads := environment_reads(path))
    }
    assert offending == {}


def test_the_check_sees_every_form(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom os import getenv\n"
        "a = os.environ['A']\nb = os.environ.get('B')\nc = os.getenv('C')\nd = dict(os.environ)\n"
    )
    assert len(environment_reads(module)) == 5


def test_every_allowed_module_still_needs_it() -> None:
    for name in ALLOWED:
        assert environment_reads(PACKAGE / name), f"{name} no longer reads the environment"
