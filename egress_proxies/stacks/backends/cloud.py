"""The gs:// and azblob:// backends' reader: a GCS bucket or an Azure container, through obstore.

The URLs are the ones pulumi's blob library (gocloud) reads:
`gs://bucket/prefix` and `azblob://container/prefix`. Credentials come from the
environment, never the URL: Google's service account variables or application
default credentials (`GOOGLE_APPLICATION_CREDENTIALS`, the metadata server);
for Azure the storage account from the URL (`?storage_account=`, gocloud's
parameter) with a SAS token (`AZURE_STORAGE_SAS_TOKEN`, read by both) or the
account key (gocloud reads `AZURE_STORAGE_KEY`, obstore `AZURE_STORAGE_ACCOUNT_KEY`),
or a service principal / workload identity (`AZURE_CLIENT_ID` and the rest).
Everything above the store (pulumi's key layout, locks, the inventory) is
`BlobBackend`'s, as for s3://. Neither cloud can be reached from the machines
this project is tested on: the store's calls are tested over obstore's S3 store
against a real S3-compatible server (`tests/stacks/test_cloud_reader.py`), the
GCS and Azure constructors only as far as they go without a network.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import BaseError, NotFoundError
from obstore.store import AzureStore, GCSStore, ObjectStore

from egress_proxies.stacks.backends.blob import BackendUnavailableError
from egress_proxies.stacks.backends.url import AZBLOB, BackendUrl

T = TypeVar("T")

_LIST_CHUNK = 1000
_READERS = 16  # reads in flight while reading every checkpoint


def cloud_store(url: BackendUrl) -> ObjectStore:
    """The obstore client of a gs:// or azblob:// URL (it connects on first use)."""
    parts = urlsplit(url.text)
    prefix = parts.path.strip("/") or None
    if url.kind == AZBLOB:
        account = url.query.get("storage_account")  # gocloud's parameter; else from the variable
        if account:
            return AzureStore(parts.netloc, prefix=prefix, account_name=account)
        return AzureStore(parts.netloc, prefix=prefix)
    return GCSStore(parts.netloc, prefix=prefix)


class CloudStore:
    """Lists, reads and deletes the objects under the backend's prefix, through obstore."""

    def __init__(self, url: BackendUrl, store: ObjectStore | None = None) -> None:
        self._shown = url.text
        self._store = store if store is not None else cloud_store(url)

    def __repr__(self) -> str:
        return f"<CloudStore {self._shown}>"

    def check(self) -> None:
        """List one key: the store answers, the credentials work and the bucket exists."""
        self._call(lambda: next(iter(obstore.list(self._store, chunk_size=1)), None))

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (a directory-like prefix, as pulumi's layout has)."""

        def listing() -> list[str]:
            chunks = obstore.list(self._store, prefix.rstrip("/") or None, chunk_size=_LIST_CHUNK)
            return [item["path"] for chunk in chunks for item in chunk]

        return self._call(listing)

    def get(self, key: str) -> bytes | None:
        """One object's body; None if it does not exist."""

        def reading() -> bytes | None:
            try:
                return obstore.get(self._store, key).bytes().to_bytes()
            except (NotFoundError, FileNotFoundError):  # obstore raises the builtin one
                return None

        return self._call(reading)

    def get_all(self, prefix: str) -> Mapping[str, bytes]:
        """Every object under `prefix`: one listing, then concurrent reads."""
        keys = self.keys(prefix)
        with ThreadPoolExecutor(_READERS, thread_name_prefix="cloud-read") as pool:
            bodies = list(pool.map(self.get, keys))
        return {key: body for key, body in zip(keys, bodies, strict=True) if body is not None}

    def delete(self, keys: Sequence[str]) -> None:
        """Delete `keys` (a missing one is fine)."""
        if keys:
            self._call(lambda: obstore.delete(self._store, list(keys)))

    def _call(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except (BaseError, OSError) as error:  # OSError: obstore maps some errors to builtins
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else "failed"
            raise BackendUnavailableError(f"state backend {self._shown}: {first_line}") from None
