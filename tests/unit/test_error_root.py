"""Every exception class egress-proxies defines derives from its one root."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import egress_proxies
from egress_proxies.errors import EgressProxiesError
from egress_proxies.leases.store import InvalidTtlError


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
