"""The console package's public surface is exactly what we mean it to be."""

from __future__ import annotations

import pytest

from egress_proxies import console

pytestmark = pytest.mark.unit


def test_console_exports() -> None:
    assert set(console.__all__) == {
        "DEFAULT_PORT",
        "PREFIX",
        "Console",
        "ConsoleTokenDirectory",
        "ConsoleUser",
        "ConsoleUsers",
        "History",
        "RedisTally",
        "Role",
        "bound_port",
        "open_tally",
        "register_pool_book",
        "start_console",
        "users_from_secret_data",
    }
