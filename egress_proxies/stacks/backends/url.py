"""The `--state-backend` URL: which Pulumi DIY backend holds the stacks, with no secret in it.

    file:///var/lib/egress-proxies                 the default: a directory (one replica)
    postgres://pulumi@db:5432/pulumi?sslmode=require&table=pulumi_state
    s3://bucket/prefix?region=eu-west-1            AWS S3
    s3://bucket?endpoint=http://minio:9000&use_path_style=true&disable_https=true
    gs://bucket/prefix                             Google Cloud Storage (untested here)
    azblob://container/prefix?storage_account=name Azure Blob Storage (untested here)

Passwords come from the environment (`PGPASSWORD`; `AWS_ACCESS_KEY_ID` and
`AWS_SECRET_ACCESS_KEY`; Google's and Azure's credential variables), filled
from a Secret: a URL that carries one is
refused, so the URL itself can be logged, shown and written to a stack's
`Pulumi.yaml`. Every error names the problem and shows the URL with any
password replaced by `***`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from egress_proxies.errors import EgressProxiesError

FILE, POSTGRES, S3, GS, AZBLOB = "file", "postgres", "s3", "gs", "azblob"
_SCHEMES = {"file": FILE, "postgres": POSTGRES, "s3": S3, "gs": GS, "azblob": AZBLOB}
_BOOLEANS = {"true", "false", "1", "0"}

# The variables each scheme's clients read their credentials and defaults from:
# passed on to every pulumi process, never logged.
CREDENTIAL_VARIABLES = {
    FILE: (),
    POSTGRES: ("PGPASSWORD", "PGUSER", "PGHOST", "PGPORT", "PGDATABASE", "PGSSLMODE", "PGPASSFILE"),
    S3: (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
    ),
    GS: (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_PATH",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
    ),
    AZBLOB: (
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_TENANT_ID",
        "AZURE_FEDERATED_TOKEN_FILE",
        "AZURE_AUTHORITY_HOST",
    ),
}


class BackendUrlError(EgressProxiesError, ValueError):
    """A state backend URL that cannot work; the message holds no password."""


@dataclass(frozen=True)
class BackendUrl:
    """A parsed state backend URL; `text` is safe to log (it holds no password)."""

    text: str
    kind: str

    def __str__(self) -> str:
        return self.text

    @property
    def query(self) -> dict[str, str]:
        """The URL's query parameters (the last of a repeated one wins)."""
        return dict(parse_qsl(urlsplit(self.text).query))

    @property
    def credential_variables(self) -> tuple[str, ...]:
        """The environment variables this backend's clients read credentials from."""
        return CREDENTIAL_VARIABLES[self.kind]


def redact(text: str) -> str:
    """`text` with the password of a URL's userinfo replaced by `***`."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return text
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def parse_backend_url(text: str) -> BackendUrl:
    """Validate a state backend URL; BackendUrlError (one line, no password) if unusable."""
    shown = redact(text.strip())
    try:
        parts = urlsplit(text.strip())
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as error:
        raise BackendUrlError(f"{shown}: not a URL ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise BackendUrlError(
            f"{shown}: unknown scheme {scheme or '(none)'!r}: "
            "use file://, postgres://, s3://, gs:// or azblob://"
        )
    kind = _SCHEMES[scheme]
    if parts.password is not None:
        variable = "PGPASSWORD" if kind == POSTGRES else "the environment"
        raise BackendUrlError(
            f"{shown}: a password in the URL would be logged and written "
            f"to every stack's Pulumi.yaml; give it in {variable} (from a Secret) instead"
        )
    query = dict(parse_qsl(parts.query))
    if kind == FILE and not parts.path:
        raise BackendUrlError(f"{shown}: file:// needs an absolute path")
    if kind == S3:
        _check_s3(shown, parts.netloc, query)
    if kind in (GS, AZBLOB) and not parts.netloc:
        what = "bucket" if kind == GS else "container"
        raise BackendUrlError(f"{shown}: {scheme}:// needs a {what}, {scheme}://{what}/prefix")
    if kind == POSTGRES and not (parts.path.strip("/") or parts.hostname):
        raise BackendUrlError(
            f"{shown}: name the server and database, postgres://user@host:5432/database"
        )
    return BackendUrl(text=text.strip(), kind=kind)


def _check_s3(shown: str, bucket: str, query: dict[str, str]) -> None:
    if not bucket:
        raise BackendUrlError(f"{shown}: s3:// needs a bucket, s3://bucket/prefix")
    for flag in ("use_path_style", "disable_https"):
        if flag in query and query[flag].lower() not in _BOOLEANS:
            raise BackendUrlError(f"{shown}: {flag} must be true or false")
    endpoint = query.get("endpoint")
    if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
        raise BackendUrlError(f"{shown}: endpoint must be an http:// or https:// URL")
