"""The postgres:// backend's reader: pulumi's DIY PostgreSQL table, through psycopg 3.

pulumi (>= 3.176) keeps every blob of the backend as one row of one table
(`pulumi_state` unless the URL says `table=`):

    key TEXT PRIMARY KEY, data JSON NOT NULL ({"data": <base64 of the blob>}), updated_at

Like every non-file DIY backend, pulumi prefixes each key with the URL's
path: the database name (`postgres://host/db` keeps `db/.pulumi/...`). So a
listing is one `SELECT key ... LIKE prefix%` on the primary key's
text_pattern_ops index, and every checkpoint of the project is one query.
A table that does not exist yet reads as empty; `check` creates it with
pulumi's schema, or names it when the role may not.
libpq takes the password from PGPASSWORD (or a passfile), never the URL.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
from psycopg import sql

from egress_proxies.stacks.backends.blob import BackendUnavailableError
from egress_proxies.stacks.backends.url import BackendUrl

DEFAULT_TABLE = "pulumi_state"
_CONNECT_TIMEOUT_SECONDS = "5"
# pulumi's own schema (pkg/backend/diy/postgres/schema.sql), for a database
# where the table does not exist yet.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    key TEXT PRIMARY KEY,
    data JSON NOT NULL,
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS {index} ON {table} (key text_pattern_ops)
"""


class PostgresStore:
    """Reads and deletes rows of the backend's table; one connection, reopened after a failure."""

    def __init__(self, url: BackendUrl) -> None:
        parts = urlsplit(url.text)
        query = dict(parse_qsl(parts.query))
        self.table = query.pop("table", DEFAULT_TABLE)
        self.prefix = parts.path.strip("/") + "/" if parts.path.strip("/") else ""
        query.setdefault("connect_timeout", _CONNECT_TIMEOUT_SECONDS)
        self._conninfo = parts._replace(scheme="postgresql", query=urlencode(query)).geturl()
        self._shown = url.text
        self._identifier = sql.Identifier(*self.table.split("."))
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "connected" if self._connection and not self._connection.closed else "idle"
        return f"<PostgresStore table={self.table} prefix={self.prefix or '/'} [{state}]>"

    def check(self) -> None:
        """Connect, and create pulumi's table if it is missing (as pulumi would on login)."""
        exists = self._rows("SELECT to_regclass(%s)::text", (self.table,))[0][0]
        if exists is None:
            statement = sql.SQL(_SCHEMA).format(
                table=self._identifier,
                index=sql.Identifier(f"{self.table.rpartition('.')[2]}_key_prefix_idx"),
            )
            try:
                self._rows(statement, (), fetch=False)
            except BackendUnavailableError as error:
                raise BackendUnavailableError(
                    f"state backend {self._shown}: table {self.table} does not exist "
                    f"and cannot be created ({error})"
                ) from None

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (an index range scan)."""
        statement = sql.SQL("SELECT key FROM {} WHERE key LIKE %s").format(self._identifier)
        rows = self._rows(statement, (_like(self.prefix + prefix),))
        return [str(row[0])[len(self.prefix) :] for row in rows]

    def get(self, key: str) -> bytes | None:
        """One blob, decoded; None if the key does not exist."""
        statement = sql.SQL("SELECT data->>'data' FROM {} WHERE key = %s").format(self._identifier)
        rows = self._rows(statement, (self.prefix + key,))
        return base64.b64decode(str(rows[0][0])) if rows else None

    def get_all(self, prefix: str) -> Mapping[str, bytes]:
        """Every blob under `prefix`, in one query."""
        statement = sql.SQL("SELECT key, data->>'data' FROM {} WHERE key LIKE %s").format(
            self._identifier
        )
        rows = self._rows(statement, (_like(self.prefix + prefix),))
        return {str(key)[len(self.prefix) :]: base64.b64decode(str(data)) for key, data in rows}

    def delete(self, keys: Sequence[str]) -> None:
        """Delete the rows of `keys`."""
        statement = sql.SQL("DELETE FROM {} WHERE key = ANY(%s)").format(self._identifier)
        self._rows(statement, ([self.prefix + key for key in keys],), fetch=False)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _rows(
        self, statement: str | sql.Composable, params: Sequence[object], *, fetch: bool = True
    ) -> list[tuple[object, ...]]:
        with self._lock:
            try:
                connection = self._connect()
                cursor = connection.execute(statement, params)  # type: ignore[arg-type]
                return cursor.fetchall() if fetch else []
            except psycopg.errors.UndefinedTable:
                return []  # no stack written yet: pulumi creates the table on first use
            except psycopg.errors.InsufficientPrivilege as error:
                raise BackendUnavailableError(
                    f"state backend {self._shown}: permission denied on table {self.table} "
                    f"({_first_line(error)})"
                ) from None
            except psycopg.Error as error:
                self._drop()
                raise BackendUnavailableError(
                    f"state backend {self._shown}: {_first_line(error)}"
                ) from None

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._connection is None or self._connection.closed:
            self._connection = psycopg.connect(self._conninfo, autocommit=True)
        return self._connection

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _like(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _first_line(error: Exception) -> str:
    """libpq's message without its detail lines (it never holds the password)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
