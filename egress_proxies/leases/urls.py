"""Store URLs in logs and reprs: never with their password."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """The URL with any password replaced by `***`, fit for logs, errors and reprs."""
    parts = urlsplit(url)
    if "@" in url and "@" not in parts.netloc:
        # Userinfo outside the netloc (no `//`, or a `/?#` in the password): mask all before it.
        return "***@" + url.rpartition("@")[2]
    if parts.password is None and "password=" not in parts.query:
        return url
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{host}"
    query = "&".join(
        "password=***" if item.startswith("password=") else item
        for item in parts.query.split("&")
        if item
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
