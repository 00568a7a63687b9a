"""A kubernetes Proxy without an image gets the operator's --squid-image."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress_proxies.cli import build_parser, read_options
from egress_proxies.model import DEFAULT_SQUID_IMAGE, ProxySpec, with_squid_image
from egress_proxies.settings import RunSettings

pytestmark = pytest.mark.unit


def spec(kubernetes: dict[str, object]) -> ProxySpec:
    return ProxySpec.model_validate({"provider": "kubernetes", "kubernetes": kubernetes})


def test_an_unset_image_is_the_operators_default() -> None:
    filled = with_squid_image(spec({}), "localhost/egress-proxies/squid:5.7")
    assert filled.kubernetes is not None
    assert filled.kubernetes.image == "localhost/egress-proxies/squid:5.7"


def test_an_image_in_the_spec_wins_over_the_default() -> None:
    filled = with_squid_image(spec({"image": "example/squid:1"}), "localhost/other:2")
    assert filled.kubernetes is not None
    assert filled.kubernetes.image == "example/squid:1"


def test_a_spec_without_a_kubernetes_block_is_unchanged() -> None:
    external = ProxySpec.model_validate(
        {"mode": "External", "endpoint": {"host": "127.0.0.1", "port": 3128}}
    )
    assert with_squid_image(external, "localhost/x:1") is external


def test_the_setting_defaults_to_the_public_image_and_reads_flag_and_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    parser = build_parser()
    base = ["run", "--state-dir", str(tmp_path)]
    assert read_options(parser.parse_args(base), RunSettings).squid_image == DEFAULT_SQUID_IMAGE
    monkeypatch.setenv("EGRESS_PROXIES_SQUID_IMAGE", "localhost/egress-proxies/squid:5.7")
    settings = read_options(parser.parse_args(base), RunSettings)
    assert settings.squid_image == "localhost/egress-proxies/squid:5.7"
    flagged = parser.parse_args([*base, "--squid-image", "registry.example/squid:6"])
    assert read_options(flagged, RunSettings).squid_image == "registry.example/squid:6"
