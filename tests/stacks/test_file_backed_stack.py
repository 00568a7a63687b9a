"""`_FileBackedStack` leans on pulumi's `Stack` internals; this pins them to what was checked.

`stacks/operations.py` subclasses `auto.Stack` without running its
`__init__` (which runs `pulumi stack select`) and overrides `outputs()` (read
from the checkpoint, not `pulumi stack output`) and `info()` (no `pulumi
stack history`), so an `up` starts one CLI process instead of four. The
public Automation API would cost those three processes on every operation;
instead these tests fail when a pulumi upgrade changes what the subclass
relies on: which methods `up`, `refresh` and `destroy` reach, and which
instance attributes those read. When one fails, read the new `Stack` code,
check the subclass still sets and overrides all it needs, then update the
pinned sets here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from pulumi import automation as auto

from egress_proxies.stacks.operations import _FileBackedStack

pytestmark = pytest.mark.unit

ENTRY_POINTS = ("up", "refresh", "destroy")
# What pulumi 3.272's Stack reaches from the entry points, with our overrides in place.
PINNED_METHODS = {
    "_check_inline_support",
    "_remote",
    "_remote_args",
    "_run_pulumi_cmd_sync",
    "_setup_event_log",
    "destroy",
    "info",
    "outputs",
    "refresh",
    "up",
}


def _self_attributes(function: Callable[..., Any]) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


def reached(cls: type) -> tuple[set[str], set[str]]:
    """The methods (and properties) the entry points reach, and the instance data they read."""
    methods: set[str] = set()
    data: set[str] = set()
    pending = list(ENTRY_POINTS)
    while pending:
        name = pending.pop()
        if name in methods or name in data:
            continue
        member = inspect.getattr_static(cls, name, None)
        function = member.fget if isinstance(member, property) else member
        if not inspect.isfunction(function):
            data.add(name)
            continue
        methods.add(name)
        pending += sorted(_self_attributes(function))
    return methods, data


def test_the_entry_points_reach_the_methods_that_were_checked() -> None:
    methods, _ = reached(_FileBackedStack)
    assert methods == PINNED_METHODS
    assert "history" not in methods  # info() is ours: no `pulumi stack history` process


def test_every_attribute_they_read_is_one_the_subclass_sets() -> None:
    _, data = reached(_FileBackedStack)
    stack = _FileBackedStack.__new__(_FileBackedStack)
    _FileBackedStack.__init__(stack, "a.stack", workspace=None, backend=None)  # type: ignore[arg-type]
    assert data <= set(vars(stack)), data - set(vars(stack))


def test_outputs_and_info_are_overridden_and_the_skipped_init_only_selects() -> None:
    assert _FileBackedStack.outputs is not auto.Stack.outputs
    assert _FileBackedStack.info is not auto.Stack.info
    # Stack.__init__ sets these and then creates or selects the stack (a CLI process).
    assert _self_attributes(auto.Stack.__init__) == {"name", "workspace", "_mode"}
