"""Fixtures of the GCE tests: the stand-in for Google Cloud, its key file, tokens and inventory."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2 import service_account

from egress_proxies.clock import ManualClock
from egress_proxies.providers.gcp import GceInventory
from egress_proxies.providers.gcp_auth import COMPUTE_SCOPE, GoogleAuthTokens
from tests.providers.fake_compute import (
    PROJECT,
    SERVICE_ACCOUNT_EMAIL,
    FakeCompute,
    serving,
)


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
