"""A lease store URL's password shows in no error, log line or repr: `redact_url` masks it."""

from __future__ import annotations

import pytest

from egress_proxies import cli
from egress_proxies.leases import open_lease_store, redact_url
from egress_proxies.settings import DiscoverySettings, RunSettings

pytestmark = pytest.mark.unit

PASSWORD = "s3cretpw"
URL = f"redis://:{PASSWORD}@host:6379/0"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (URL, "redis://:***@host:6379/0"),
        (
            "rediss://user:s3cretpw@h:6380/1?password=s3cretpw",
            "rediss://user:***@h:6380/1?password=***",
        ),
        ("redis://user@host:6379/0", "redis://user@host:6379/0"),
        ("//:s3cretpw@redis", "//:***@redis"),
        (":s3cretpw@redis", "***@redis"),
        ("default:s3cretpw@redis:6379", "***@redis:6379"),
        ("redis://:s3cret/pw@host", "***@host"),
        ("redis://:s3cret?pw@host", "***@host"),
        ("memory-x", "memory-x"),
    ],
)
def test_redact_url_masks_every_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url", ["//:s3cretpw@redis", ":s3cretpw@redis", "s3cretpw@redis", "http://u:s3cretpw@h"]
)
def test_a_refused_url_is_named_without_its_password(url: str) -> None:
    with pytest.raises(ValueError, match="expected 'memory' or a redis") as raised:
        open_lease_store(url)
    assert PASSWORD not in str(raised.value)


@pytest.mark.parametrize("model", [RunSettings, DiscoverySettings])
def test_settings_reprs_show_the_store_url_redacted(
    model: type[RunSettings | DiscoverySettings],
) -> None:
    settings = model.model_validate({"lease_store": URL})
    for shown in (repr(settings), str(settings)):
        assert PASSWORD not in shown
        assert "redis://:***@host:6379/0" in shown


@pytest.mark.parametrize("command", ["run", "discovery"])
@pytest.mark.parametrize("url", ["//:s3cretpw@redis", "ftp://u:s3cretpw@h"])
def test_a_refused_store_flag_is_named_without_its_password(
    capsys: pytest.CaptureFixture[str], command: str, url: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--lease-store", url])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--lease-store" in error
    assert PASSWORD not in error
