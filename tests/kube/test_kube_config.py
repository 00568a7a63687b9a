"""Credentials from every kubeconfig auth kind and from an in-cluster service account."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from egress_proxies.kube import Credentials, KubeConfigError, TransportError, write_kubeconfig
from egress_proxies.operator.login import connection_info

pytestmark = pytest.mark.unit

CA = b"-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(tmp_path: Path, user: dict[str, Any], **cluster: Any) -> Path:
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://127.0.0.1:6443",
                            **(cluster or {"certificate-authority-data": b64(CA)}),
                        },
                    }
                ],
                "users": [{"name": "u", "user": user}],
                "contexts": [
                    {"name": "other", "context": {"cluster": "c"}},
                    {"name": "main", "context": {"cluster": "c", "user": "u"}},
                ],
                "current-context": "main",
            }
        )
    )
    return path


def exec_plugin(tmp_path: Path, status: dict[str, Any] | str, exit_code: int = 0) -> Path:
    script = tmp_path / "bin" / "issue-credential"
    script.parent.mkdir(exist_ok=True)
    printed = status if isinstance(status, str) else json.dumps({"status": status})
    script.write_text(
        "#!/bin/sh\n"
        'echo "called with $1 $EXTRA" >> "$(dirname "$0")/calls"\n'
        f"cat <<'EOF'\n{printed}\nEOF\n"
        'echo "plugin says no" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)
    return script


async def test_a_bearer_token_is_sent_as_is_and_never_shown(tmp_path: Path) -> None:
    credentials = Credentials.from_kubeconfig(kubeconfig(tmp_path, {"token": "s3cret"}))
    assert credentials.server == "https://127.0.0.1:6443"
    assert credentials.ca_pem == CA
    assert credentials.auth_kinds == ("token",)
    material = await credentials.login_material()
    assert (material.token, material.certificate_pem, material.expiration) == ("s3cret", None, None)
    assert "s3cret" not in repr(credentials) + repr(material)
    assert repr(credentials) == "Credentials(server='https://127.0.0.1:6443', auth=token)"


async def test_a_token_file_is_read_relative_to_the_kubeconfig_and_again_after_rotation(
    tmp_path: Path,
) -> None:
    (tmp_path / "token").write_text("first\n")
    credentials = Credentials.from_kubeconfig(kubeconfig(tmp_path, {"tokenFile": "token"}))
    assert credentials.auth_kinds == ("token-file",)
    assert (await credentials.login_material()).token == "first"
    (tmp_path / "token").write_text("rotated\n")
    assert (await credentials.login_material()).token == "rotated"


async def test_a_client_certificate_from_files_and_from_inline_data(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "client.crt").write_bytes(CERT)
    (tmp_path / "client.key").write_bytes(KEY)
    from_files = Credentials.from_kubeconfig(
        kubeconfig(
            tmp_path,
            {"client-certificate": "client.crt", "client-key": str(tmp_path / "client.key")},
            **{"certificate-authority": "ca.crt"},
        )
    )
    inline = Credentials.from_kubeconfig(
        kubeconfig(tmp_path, {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)})
    )
    for credentials in (from_files, inline):
        assert credentials.auth_kinds == ("client-certificate",)
        assert credentials.ca_pem == CA
        material = await credentials.login_material()
        assert (material.token, material.certificate_pem, material.private_key_pem) == (
            None,
            CERT,
            KEY,
        )
        info = connection_info(material)
        assert (info.certificate_data, info.private_key_data, info.scheme) == (CERT, KEY, None)
        assert "PRIVATE" not in repr(material)


@pytest.mark.parametrize("api_version", ["v1", "v1beta1"])
async def test_an_exec_plugin_token_carries_its_expiry_to_kopf(
    tmp_path: Path, api_version: str
) -> None:
    expires = "2031-01-02T03:04:05Z"
    exec_plugin(tmp_path, {"token": "issued", "expirationTimestamp": expires})
    user = {
        "exec": {
            "apiVersion": f"client.authentication.k8s.io/{api_version}",
            "command": "./bin/issue-credential",
            "args": ["--cluster=c"],
            "env": [{"name": "EXTRA", "value": "from-kubeconfig"}],
            "interactiveMode": "Never",
        }
    }
    credentials = Credentials.from_kubeconfig(kubeconfig(tmp_path, user))
    assert credentials.auth_kinds == ("exec",)
    info = connection_info(await credentials.login_material())
    assert (info.scheme, info.token) == ("Bearer", "issued")
    assert info.expiration == datetime.datetime(2031, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert (tmp_path / "bin" / "calls").read_text() == "called with --cluster=c from-kubeconfig\n"


async def test_an_exec_plugin_may_issue_a_client_certificate(tmp_path: Path) -> None:
    exec_plugin(tmp_path, {"clientCertificateData": CERT.decode(), "clientKeyData": KEY.decode()})
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": str(tmp_path / "bin" / "issue-credential"),
        }
    }
    material = await Credentials.from_kubeconfig(kubeconfig(tmp_path, user)).login_material()
    assert (material.token, material.certificate_pem, material.private_key_pem) == (None, CERT, KEY)


@pytest.mark.parametrize(
    ("printed", "exit_code", "message"),
    [
        ({"token": "never-read"}, 1, "exited 1: plugin says no"),
        ("not json", 0, "did not print an ExecCredential"),
        ({"expirationTimestamp": "2031-01-02T03:04:05Z"}, 0, "neither a token nor a certificate"),
    ],
)
async def test_a_failing_exec_plugin_is_a_transport_error(
    tmp_path: Path, printed: dict[str, Any] | str, exit_code: int, message: str
) -> None:
    script = exec_plugin(tmp_path, printed, exit_code)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}}
    credentials = Credentials.from_kubeconfig(kubeconfig(tmp_path, user))
    with pytest.raises(TransportError, match=message) as raised:
        await credentials.login_material()
    assert "never-read" not in str(raised.value)
    assert isinstance(raised.value, OSError)


async def test_an_unknown_exec_api_version_is_a_configuration_error(tmp_path: Path) -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v2", "command": "true"}}
    credentials = Credentials.from_kubeconfig(kubeconfig(tmp_path, user))
    with pytest.raises(KubeConfigError, match="apiVersion"):
        await credentials.login_material()


async def test_basic_auth_reaches_kopf_as_username_and_password(tmp_path: Path) -> None:
    user = {"username": "admin", "password": "hunter2"}
    credentials = Credentials.from_kubeconfig(kubeconfig(tmp_path, user))
    assert credentials.auth_kinds == ("basic",)
    info = connection_info(await credentials.login_material())
    assert (info.username, info.password, info.token) == ("admin", "hunter2", None)


async def test_in_cluster_the_service_account_token_file_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("pod-token")
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "namespace").write_text("egress-proxies")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    credentials = Credentials.in_cluster(tmp_path)
    assert credentials.server == "https://[fd00::1]:443"
    assert credentials.ca_pem == CA
    assert credentials.auth_kinds == ("token-file",)
    assert (await credentials.login_material()).token == "pod-token"
    (tmp_path / "token").write_text("rotated-token")
    assert (await credentials.login_material()).token == "rotated-token"


def test_outside_a_pod_without_a_kubeconfig_the_error_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="no kubeconfig given and not in a pod"):
        Credentials.load(None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("current-context: nowhere\nclusters: []\ncontexts: []\n", "nowhere"),
        ("clusters: [oops", "kubeconfig"),
        ("clusters:\n- name: c\n  cluster: {server: 5}\ncontexts: []\n", "kubeconfig"),
    ],
)
def test_a_broken_kubeconfig_is_a_configuration_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(KubeConfigError, match=message):
        Credentials.from_kubeconfig(path)
    with pytest.raises(KubeConfigError, match="not found"):
        Credentials.from_kubeconfig(tmp_path / "missing")


def test_a_written_kubeconfig_reads_back_as_the_same_user(tmp_path: Path) -> None:
    written = Credentials.from_client_certificate("https://127.0.0.1:1", CA, CERT, KEY)
    path = tmp_path / "kubeconfig-cert"
    write_kubeconfig(path, written)
    assert path.stat().st_mode & 0o777 == 0o600
    read = Credentials.load(path)
    assert (read.server, read.ca_pem, read.auth_kinds) == (
        "https://127.0.0.1:1",
        CA,
        ("client-certificate",),
    )
    assert read.with_token("t").auth_kinds == ("token",)
