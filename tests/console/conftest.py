"""Fixtures of the console tests: named console users, a crawler token, a served console."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from egress_proxies.console import ConsoleUser, users_from_secret_data
from harness.console import ConsoleSite, served_console

CRAWLER = "crawler-a"  # the crawler token's name (its key in the token Secret)


@dataclass(frozen=True)
class Tokens:
    """One token per role: alice may act, bob may look, the crawler may lease."""

    actor: str
    viewer: str
    crawler: str

    def users(self) -> dict[str, ConsoleUser]:
        """The console users, read as from the console Secret's data."""
        return users_from_secret_data(
            {
                "alice.act": base64.b64encode(self.actor.encode()).decode(),
                "bob.view": base64.b64encode(self.viewer.encode()).decode(),
            }
        )


@pytest.fixture
def tokens() -> Tokens:
    return Tokens(*(secrets.token_urlsafe(24) for _ in range(3)))


@pytest.fixture
def site(tokens: Tokens) -> Iterator[ConsoleSite]:
    users = tokens.users()
    with served_console(
        lambda: users, frozenset({tokens.crawler}), crawler_names={tokens.crawler: CRAWLER}
    ) as served:
        yield served
