"""The s3:// backend's reader: a bucket (AWS S3 or an S3-compatible store), through boto3.

The URL is the one pulumi's blob library (gocloud s3blob) reads:
`s3://bucket/prefix?region=...&endpoint=http://host:9000&use_path_style=true&disable_https=true`.
The same parameters configure the boto3 client, so both talk to one store.
Credentials come from the AWS_* variables (or a profile, or the pod's web
identity), never the URL. A listing is ListObjectsV2 under the prefix (a
page per 1,000 keys); the checkpoints are read with concurrent GETs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qsl, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from egress_proxies.stacks.backends.blob import BackendUnavailableError
from egress_proxies.stacks.backends.url import BackendUrl

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

T = TypeVar("T")

_READERS = 16  # GETs in flight while reading every checkpoint
_DELETE_BATCH = 1000  # DeleteObjects' limit
_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3Store:
    """Lists, reads and deletes the objects under the backend's prefix."""

    def __init__(self, url: BackendUrl) -> None:
        parts = urlsplit(url.text)
        query = dict(parse_qsl(parts.query))
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/") + "/" if parts.path.strip("/") else ""
        self._shown = url.text
        endpoint = query.get("endpoint")
        if endpoint and _true(query.get("disable_https")):
            endpoint = endpoint.replace("https://", "http://", 1)
        self._client: S3Client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            region_name=query.get("region") or None,
            config=Config(
                s3={"addressing_style": "path" if _true(query.get("use_path_style")) else "auto"},
                connect_timeout=5,
                read_timeout=20,
                retries={"max_attempts": 2, "mode": "standard"},
                max_pool_connections=_READERS,
            ),
        )

    def __repr__(self) -> str:
        return f"<S3Store bucket={self.bucket} prefix={self.prefix or '/'}>"

    def check(self) -> None:
        """HeadBucket: the store answers, the credentials work and the bucket exists."""
        self._call(lambda: self._client.head_bucket(Bucket=self.bucket))

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (ListObjectsV2, a page per 1,000 keys)."""

        def listing() -> list[str]:
            found: list[str] = []
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                found += [item["Key"][len(self.prefix) :] for item in page.get("Contents", [])]
            return found

        return self._call(listing)

    def get(self, key: str) -> bytes | None:
        """One object's body; None if it does not exist."""

        def reading() -> bytes | None:
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in _MISSING:
                    return None
                raise
            return response["Body"].read()

        return self._call(reading)

    def get_all(self, prefix: str) -> Mapping[str, bytes]:
        """Every object under `prefix`: one listing, then concurrent GETs."""
        keys = self.keys(prefix)
        with ThreadPoolExecutor(_READERS, thread_name_prefix="s3-read") as pool:
            bodies = list(pool.map(self.get, keys))
        return {key: body for key, body in zip(keys, bodies, strict=True) if body is not None}

    def delete(self, keys: Sequence[str]) -> None:
        """Delete `keys` (DeleteObjects, 1,000 at a time)."""
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": self.prefix + key} for key in keys[start : start + _DELETE_BATCH]]
            self._call(
                lambda batch=batch: self._client.delete_objects(  # type: ignore[misc]
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
            )

    def _call(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except ClientError as error:
            raise BackendUnavailableError(
                f"state backend {self._shown}: {_client_error(error, self.bucket)}"
            ) from None
        except BotoCoreError as error:
            raise BackendUnavailableError(f"state backend {self._shown}: {error}") from None


def _client_error(error: ClientError, bucket: str) -> str:
    details = error.response.get("Error", {})
    code = details.get("Code", "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in {"NoSuchBucket", "404", "NotFound"}:
        return f"bucket {bucket} does not exist"
    if code in {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"} or (
        status == 403
    ):
        return (
            f"access to bucket {bucket} denied ({code or status}): "
            "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    return f"{code or status}: {details.get('Message', '')}".strip()


def _true(value: str | None) -> bool:
    return (value or "").lower() in {"true", "1"}
