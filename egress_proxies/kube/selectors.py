"""Kubernetes label selectors: parsed and validated once, matched locally, rendered for the API.

The grammar is the API server's (`labelSelector`): comma-separated
requirements, each `key`, `!key`, `key=value` (or `==`), `key!=value`,
`key in (a,b)` or `key notin (a,b)`. Keys and values follow the label
syntax rules, so a selector the operator accepts is one the API server
accepts, and a typo fails at start-up, not as an empty fleet.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from egress_proxies.errors import EgressProxiesError

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"
_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
_SET = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_BINARY = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


class SelectorError(ValueError, EgressProxiesError):
    """A label selector that does not parse or breaks the label syntax rules."""


class Operator(StrEnum):
    """How one requirement tests a label."""

    EXISTS = "exists"
    NOT_EXISTS = "!"
    IN = "in"
    NOT_IN = "notin"


@dataclass(frozen=True)
class Requirement:
    """One requirement: `key` tested by `operator` against `values` (sorted)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy this requirement."""
        if self.operator == Operator.EXISTS:
            return self.key in labels
        if self.operator == Operator.NOT_EXISTS:
            return self.key not in labels
        if self.operator == Operator.IN:
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values

    def render(self) -> str:
        """This requirement in the API server's syntax."""
        if self.operator == Operator.EXISTS:
            return self.key
        if self.operator == Operator.NOT_EXISTS:
            return f"!{self.key}"
        if len(self.values) == 1:
            op = "=" if self.operator == Operator.IN else "!="
            return f"{self.key}{op}{self.values[0]}"
        return f"{self.key} {self.operator.value} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """Requirements that must all hold (an empty selector matches everything)."""

    requirements: tuple[Requirement, ...]

    def __str__(self) -> str:
        return ",".join(requirement.render() for requirement in self.requirements)

    def __repr__(self) -> str:
        return f"<LabelSelector {self}>"

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        present = labels or {}
        return all(requirement.matches(present) for requirement in self.requirements)

    def equalities(self) -> dict[str, str]:
        """The `key=value` requirements, by key."""
        return {
            r.key: r.values[0]
            for r in self.requirements
            if r.operator == Operator.IN and len(r.values) == 1
        }


def parse_selector(text: str) -> LabelSelector:
    """Parse a selector in the API server's syntax; SelectorError says what is wrong."""
    requirements = tuple(_requirement(part.strip()) for part in _split(text))
    return LabelSelector(requirements)


def _split(text: str) -> list[str]:
    """Split on the commas that separate requirements (not those inside a value set)."""
    if not text.strip():
        return []
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise SelectorError(f"unbalanced '(' in {text!r}")
    parts.append(text[start:])
    return parts


def _requirement(part: str) -> Requirement:
    if not part:
        raise SelectorError("empty requirement (a stray comma?)")
    match = _SET.match(part)
    if match:
        values = tuple(sorted({v.strip() for v in match["values"].split(",")}))
        if values == ("",):
            raise SelectorError(f"{part!r}: a value set needs at least one value")
        operator = Operator.IN if match["op"] == "in" else Operator.NOT_IN
        return Requirement(_key(match["key"]), operator, tuple(_value(v) for v in values))
    match = _BINARY.match(part)
    if match:
        operator = Operator.NOT_IN if match["op"] == "!=" else Operator.IN
        return Requirement(_key(match["key"]), operator, (_value(match["value"]),))
    if part.startswith("!"):
        return Requirement(_key(part[1:].strip()), Operator.NOT_EXISTS)
    return Requirement(_key(part), Operator.EXISTS)


def _key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise SelectorError(
            f"{key!r} is not a label key (optional DNS prefix and '/', then up to 63 "
            "alphanumerics, '-', '_' or '.', starting and ending alphanumeric)"
        )
    return key


def _value(value: str) -> str:
    if not _VALUE.fullmatch(value):
        raise SelectorError(
            f"{value!r} is not a label value (up to 63 alphanumerics, '-', '_' or '.', "
            "starting and ending alphanumeric)"
        )
    return value
