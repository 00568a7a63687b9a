"""Label selectors parse as the API server's do, match locally, and reject bad syntax clearly."""

from __future__ import annotations

import re

import pytest

from egress_proxies.kube.selectors import SelectorError, parse_selector

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "labels", "selected"),
    [
        ("shard=a", {"shard": "a"}, True),
        ("shard==a", {"shard": "b"}, False),
        ("shard!=a", {}, True),
        ("shard!=a", {"shard": "a"}, False),
        ("tier", {"tier": ""}, True),
        ("!tier", {"tier": "x"}, False),
        ("shard in (a, b),team notin (x)", {"shard": "b", "team": "y"}, True),
        ("shard in (a,b),team notin (x)", {"shard": "b", "team": "x"}, False),
        ("crawl.example.com/shard=a", {"crawl.example.com/shard": "a"}, True),
        ("", {"anything": "goes"}, True),
    ],
)
def test_a_selector_matches_as_the_api_server_would(
    text: str, labels: dict[str, str], selected: bool
) -> None:
    assert parse_selector(text).matches(labels) is selected


def test_a_selector_renders_back_in_the_api_servers_syntax() -> None:
    selector = parse_selector(" shard = a , team notin (y,x), !legacy ")
    assert str(selector) == "shard=a,team notin (x,y),!legacy"
    assert parse_selector(str(selector)) == selector
    assert selector.equalities() == {"shard": "a"}


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("shard=a,", "empty requirement"),
        ("shard in (a,b", "unbalanced '('"),
        ("shard in ()", "at least one value"),
        ("sh ard=a", "not a label key"),
        ("shard=a b", "not a label key"),
        ("shard=-a", "not a label value"),
        ("Bad_Prefix/x=1", "not a label key"),
        ("x=" + "v" * 64, "not a label value"),
    ],
)
def test_bad_syntax_is_refused_with_the_reason(text: str, complaint: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(complaint)):
        parse_selector(text)
