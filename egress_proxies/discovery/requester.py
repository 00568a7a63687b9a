"""Which crawler token the request being served carries, by its name (never the token).

The route wrapper sets it once the token is checked (routing.py); whatever the
handler calls, in the same task, reads it: the console's lease book names each
lease's holder with it. The name is the token Secret's key (`crawler-a`);
None where tokens have no names or authentication is off.
"""

from __future__ import annotations

from contextvars import ContextVar

_REQUESTER: ContextVar[str | None] = ContextVar("egress_proxies_requester", default=None)


def requester() -> str | None:
    """The name of the token the current request carries, if known."""
    return _REQUESTER.get()


def serving(name: str | None) -> None:
    """Note the current request's token name (for the rest of this task)."""
    _REQUESTER.set(name)
