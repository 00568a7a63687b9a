"""Console users: named tokens with a role, from a Secret of their own, refused with 401."""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.console import ConsoleTokenDirectory, ConsoleUser, Role, users_from_secret_data
from egress_proxies.console.access import ConsoleAuth
from egress_proxies.discovery import InvalidTokenSecretError
from egress_proxies.discovery.errors import DiscoveryApiError

pytestmark = pytest.mark.unit

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_each_key_names_a_user_and_a_role() -> None:
    users = users_from_secret_data({"alice.act": b64(ALICE), "bob.view": b64(f" {BOB}\n")})
    assert users == {
        ALICE: ConsoleUser("alice", Role.ACT),
        BOB: ConsoleUser("bob", Role.VIEW),
    }
    assert users[ALICE].may_act and not users[BOB].may_act


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("alice", ALICE, "'alice' is not <user>.view or <user>.act"),
        ("alice.admin", ALICE, "'alice.admin' is not"),
        (".act", ALICE, "'.act' is not"),
        ("alice.act", "sh0rt!", "'alice.act' is shorter than 16"),
        ("alice.act", "has a space in it!", "'alice.act' holds whitespace"),
    ],
)
def test_a_broken_key_or_token_is_refused_naming_the_key_only(
    key: str, value: str, named: str
) -> None:
    with pytest.raises(InvalidTokenSecretError, match=named) as refused:
        users_from_secret_data({key: b64(value)})
    assert value not in str(refused.value) or (value == ALICE and key.startswith("alice."))


def test_the_auth_finds_the_user_or_answers_401() -> None:
    auth = ConsoleAuth(lambda: users_from_secret_data({"alice.act": b64(ALICE)}))
    assert auth.user(f"Bearer {ALICE}") == ConsoleUser("alice", Role.ACT)
    assert repr(auth) == "<ConsoleAuth [users: 1 | may act: 1]>"
    assert auth.user(f"bearer   {ALICE} ") == ConsoleUser("alice", Role.ACT)
    for header in (None, "Bearer", f"Basic {ALICE}", f"Bearer {BOB}", f"Bearer {ALICE}x"):
        with pytest.raises(DiscoveryApiError) as refused:
            auth.user(header)
        assert refused.value.status == 401
        assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")


def test_the_directory_is_reread_when_it_changes(tmp_path: Path) -> None:
    clock = ManualClock()
    (tmp_path / "alice.act").write_text(ALICE)
    (tmp_path / ".hidden").write_text("ignored")
    users = ConsoleTokenDirectory(tmp_path, clock)
    assert set(users()) == {ALICE}
    (tmp_path / "bob.view").write_text(BOB)
    assert set(users()) == {ALICE}  # checked at most once a second
    clock.advance(1.0)
    assert set(users()) == {ALICE, BOB}
    (tmp_path / "carol").write_text("carol-token-0123456789")
    os.utime(tmp_path, None)
    clock.advance(1.0)
    assert set(users()) == {ALICE, BOB}  # a broken file keeps the last good set
    assert repr(users) == f"<ConsoleTokenDirectory {tmp_path} [users: 2]>"


def test_an_empty_directory_is_warned_about_at_startup_and_read_again_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    with caplog.at_level(logging.WARNING, logger="egress_proxies.console.access"):
        users = ConsoleTokenDirectory(tmp_path, clock)
    [warning] = [r for r in caplog.records if r.name == "egress_proxies.console.access"]
    assert str(tmp_path) in warning.getMessage() and "refused" in warning.getMessage()
    assert users() == {}
    (tmp_path / "alice.act").write_text(ALICE)
    clock.advance(1.0)
    assert set(users()) == {ALICE}
