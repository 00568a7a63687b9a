"""Key material of a dev cluster: a CA, the API server's serving cert, an admin client cert,
the service-account key.

Everything is generated once per state directory and reused by later `up`s,
so kubeconfigs written earlier stay valid.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

_VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class ClusterPki:
    """Paths of the generated files, as the API server and controller manager want them."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_pub: Path
    admin_cert: Path
    admin_key: Path


SERVING_HOSTS = ("127.0.0.1", "localhost", "kubernetes.default.svc")


def ensure_pki(directory: Path, extra_hosts: tuple[str, ...] = ()) -> ClusterPki:
    """Create the cluster's keys in `directory` unless they already exist.

    The API server's certificate names `extra_hosts` too (the node's address
    for the API server, the `kubernetes` Service IP); it is issued again when
    they change.
    """
    directory.mkdir(parents=True, exist_ok=True)
    pki = ClusterPki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
    )
    if not pki.ca_cert.exists():
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = issue_certificate("egress-proxies dev CA", ca_key, ca_key, None, is_ca=True)
        _write_key(pki.ca_key, ca_key)
        pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    hosts = [*SERVING_HOSTS, *extra_hosts]
    hosts_file = directory / "apiserver.hosts"
    current = hosts_file.read_text().split() if hosts_file.exists() else list(SERVING_HOSTS)
    if not pki.serving_cert.exists() or current != hosts:
        _issue(pki, pki.serving_cert, pki.serving_key, "kube-apiserver", hosts=hosts)
        hosts_file.write_text("\n".join(hosts) + "\n")
    if not pki.admin_cert.exists():
        _issue(pki, pki.admin_cert, pki.admin_key, "dev-admin", organization="system:masters")
    if not pki.service_account_key.exists():
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki.service_account_key, sa_key)
        pki.service_account_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pki


def _issue(
    pki: ClusterPki,
    cert_path: Path,
    key_path: Path,
    common_name: str,
    *,
    hosts: list[str] | None = None,
    organization: str | None = None,
) -> None:
    """Sign a new key's certificate with the cluster CA and write both."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    cert = issue_certificate(
        common_name, key, ca_key, ca_cert, hosts=hosts, organization=organization
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def issue_certificate(
    common_name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer_key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    *,
    is_ca: bool = False,
    hosts: list[str] | None = None,
    organization: str | None = None,
) -> x509.Certificate:
    """Sign a certificate for `key` (self-signed when `issuer` is None).

    The API server reads a client certificate's CN as the user name and each
    O as a group (`system:masters` is the built-in superuser group).
    """
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def ensure_token(path: Path) -> str:
    """A random bearer token persisted at `path` (created on first use)."""
    if not path.exists():
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()
