"""Fixtures of the integration tests: origin servers to probe through a proxy, and the local
stand-in for Google Cloud."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2 import service_account

from egress_proxies.clock import ManualClock
from egress_proxies.providers.gcp import GceInventory
from egress_proxies.providers.gcp_auth import COMPUTE_SCOPE, GoogleAuthTokens
from egress_proxies.settings import RunSettings
from harness.origins import Origin, serve_origin
from tests.integration.fake_compute import (
    PROJECT,
    SERVICE_ACCOUNT_EMAIL,
    FakeCompute,
    serving,
)


@pytest.fixture
def offline_operator_settings(tmp_path: Path) -> RunSettings:
    """Settings for an operator that is built, or run with kopf stood in, but reaches no cluster.

    Its API server address is one where nothing listens. The settings are the given
    values over the defaults: no variable of the test's environment reaches them.
    """
    kubeconfig = tmp_path / "kubeconfig"
    cluster = {
        "server": "https://127.0.0.1:1",
        "certificate-authority-data": base64.b64encode(b"unused").decode(),
    }
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "dev",
                "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "dev"}}],
                "clusters": [{"name": "dev", "cluster": cluster}],
                "users": [{"name": "dev", "user": {"token": "not-used"}}],
            }
        )
    )
    return RunSettings.model_validate(
        {"state_dir": tmp_path / "state", "kubeconfig": kubeconfig, "standalone": True}
    )


@pytest.fixture(scope="module")
async def http_origin() -> AsyncIterator[Origin]:
    """A plain HTTP origin, one per test module."""
    async with serve_origin() as origin:
        yield origin


@pytest.fixture(scope="module")
async def https_origin(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Origin]:
    """An HTTPS origin with a CA of its own (`client_ssl` trusts it), one per test module."""
    async with serve_origin(tmp_path_factory.mktemp("origin-tls")) as origin:
        yield origin


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def key_file(tmp_path: Path, signing_key: rsa.RSAPrivateKey, compute: FakeCompute) -> Path:
    """A key file shaped like the JSON `gcloud iam service-accounts keys create` writes.

    Its `token_uri` names the stand-in's token endpoint instead of Google's.
    """
    pem = signing_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = tmp_path / "key.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": "0123456789abcdef",
                "private_key": pem,
                "client_email": SERVICE_ACCOUNT_EMAIL,
                "client_id": "1234567890",
                "token_uri": f"{compute.url}/token",
            }
        )
    )
    return path


@pytest.fixture
async def compute(signing_key: rsa.RSAPrivateKey) -> AsyncIterator[FakeCompute]:
    fake = FakeCompute(PROJECT, SERVICE_ACCOUNT_EMAIL, signing_key.public_key())
    async with serving(fake):
        yield fake


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def clock() -> ManualClock:
    """Virtual time from the real wall time, which google-auth stamps a token's expiry with."""
    return ManualClock(wall=datetime.datetime.now(datetime.UTC))


@pytest.fixture
def tokens(key_file: Path, clock: ManualClock) -> Iterator[GoogleAuthTokens]:
    credentials = service_account.Credentials.from_service_account_file(
        str(key_file), scopes=[COMPUTE_SCOPE]
    )
    tokens = GoogleAuthTokens(credentials, clock=clock)
    yield tokens
    tokens.close()


@pytest.fixture
def inventory(
    compute: FakeCompute, tokens: GoogleAuthTokens, session: aiohttp.ClientSession
) -> GceInventory:
    return GceInventory(PROJECT, tokens, session, compute_url=f"{compute.url}/compute/v1")
