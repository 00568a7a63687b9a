"""The composition root adds the GCE inventory to the GC, and the GCE poll, only for a project."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from egress_proxies.operator.process import Operator
from egress_proxies.providers.gcp_auth import CredentialsError
from egress_proxies.settings import RunSettings
from tests.providers.fake_compute import PROJECT

pytestmark = pytest.mark.integration


def built(settings: RunSettings) -> Iterator[Operator]:
    operator = Operator(settings, passphrase="p")
    try:
        yield operator
    finally:
        asyncio.run(operator.runner.close())
        operator.claim.release()


def test_with_a_project_the_gc_lists_gce_and_the_poll_runs(
    offline_operator_settings: RunSettings, key_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))

    gce = {"gcp_project": PROJECT, "gce_watch_interval": 5.0}
    for operator in built(offline_operator_settings.model_copy(update=gce)):
        assert repr(operator.gce) == (
            f"<GceInventory project={PROJECT} "
            f"api=https://compute.googleapis.com/compute/v1/projects/{PROJECT}>"
        )
        assert repr(operator.gce_watcher).startswith("<InstanceWatcher gcp [interval: 0:00:05 |")
        assert repr(operator.sweeper).startswith("<Sweeper kubernetes,gcp [")


def test_without_a_project_there_is_no_gce_inventory(
    offline_operator_settings: RunSettings,
) -> None:
    for operator in built(offline_operator_settings):
        assert operator.gce is None
        assert operator.gce_watcher is None
        assert repr(operator.sweeper).startswith("<Sweeper kubernetes [")


def test_a_project_without_credentials_refuses_to_start(
    offline_operator_settings: RunSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))

    with pytest.raises(CredentialsError, match="no Google credentials"):
        Operator(
            offline_operator_settings.model_copy(update={"gcp_project": PROJECT}), passphrase="p"
        )
