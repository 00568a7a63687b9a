"""Every exception class egress-proxies defines derives from its one root, as drawn in errors.py."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import egress_proxies
from egress_proxies import errors
from egress_proxies.errors import EgressProxiesError
from egress_proxies.leases.store import InvalidTtlError

pytestmark = pytest.mark.unit

PACKAGE = Path(egress_proxies.__file__).parent


def _own_exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(egress_proxies.__path__, "egress_proxies."):
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == info.name and issubclass(value, BaseException):
                found.append(value)
    return found


def test_every_exception_class_derives_from_the_root() -> None:
    classes = _own_exception_classes()
    assert len(classes) >= 15, classes  # the walk found the package's errors
    strays = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, EgressProxiesError)
    ]
    assert strays == []


def test_bad_input_errors_keep_their_standard_base() -> None:
    assert issubclass(InvalidTtlError, ValueError)


@dataclass(frozen=True)
class Drawn:
    """One class as the drawing in errors.py shows it."""

    parent: str
    module: str
    standard_bases: tuple[str, ...]


_ENTRY = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)\s+(?P<module>\S+\.py)(?P<rest>.*)$")
_STANDARD_BASE = re.compile(r"\(an? (?P<base>[\w.]+)\)")


def _drawing() -> dict[str, Drawn]:
    """Each class in the errors.py drawing: its parent (by depth), module and standard base."""
    assert errors.__doc__ is not None
    lines = errors.__doc__.splitlines()
    root_line = next(line for line in lines if line.strip() == EgressProxiesError.__name__)
    root_indent = len(root_line) - len(root_line.lstrip())
    parents = [EgressProxiesError.__name__]
    drawn: dict[str, Drawn] = {}
    for line in lines:
        entry = _ENTRY.match(line)
        if entry is None:
            continue
        depth = (len(entry["indent"]) - root_indent) // 4 + 1
        del parents[depth:]
        name = entry["name"]
        assert name not in drawn, f"{name} is drawn twice"
        bases = tuple(m["base"].rsplit(".", 1)[-1] for m in _STANDARD_BASE.finditer(entry["rest"]))
        drawn[name] = Drawn(parents[depth - 1], entry["module"], bases)
        parents.append(name)
    return drawn


def _subclasses(root: type[BaseException]) -> list[type[BaseException]]:
    """The package's subclasses of `root` at any depth (not those a test defines)."""
    found: list[type[BaseException]] = []
    for child in root.__subclasses__():
        if child.__module__.startswith(f"{egress_proxies.__name__}."):
            found += [child, *_subclasses(child)]
    return found


def _as_drawn(cls: type[BaseException]) -> Drawn:
    """What the drawing must say about a class, read from the class itself."""
    in_tree = [b for b in cls.__bases__ if issubclass(b, EgressProxiesError)]
    assert len(in_tree) == 1, f"{cls.__name__} has more than one parent in the tree"
    module = Path(inspect.getfile(cls)).relative_to(PACKAGE).as_posix()
    standard = tuple(b.__name__ for b in cls.__bases__ if not issubclass(b, EgressProxiesError))
    return Drawn(in_tree[0].__name__, module, standard)


def test_the_drawing_in_errors_py_is_the_class_tree() -> None:
    _own_exception_classes()  # imports every module, so every subclass exists
    classes = _subclasses(EgressProxiesError)
    names = [cls.__name__ for cls in classes]
    assert len(names) == len(set(names)), "two exception classes share a name"
    actual = {cls.__name__: _as_drawn(cls) for cls in classes}
    drawing = _drawing()
    assert len(drawing) >= 20, drawing  # the parser read the drawing
    assert sorted(drawing) == sorted(actual), "errors.py draws other classes than exist"
    assert drawing == actual
