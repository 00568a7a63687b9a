"""The fleet console: the page crawler teams look at, served by the operator and the tier.

    console = Console(users, fleet, store, clock, client=client, events=events)
    runner = await start_console(console.app(), "0.0.0.0", 8091)

Off by default; on with a console token Secret of its own (access.py): keys
`<user>.view` or `<user>.act`. A crawler token opens nothing here. See
docs/console.md.
"""

from egress_proxies.console.access import (
    ConsoleTokenDirectory,
    ConsoleUser,
    ConsoleUsers,
    Role,
    users_from_secret_data,
)
from egress_proxies.console.app import DEFAULT_PORT, PREFIX, bound_port, start_console
from egress_proxies.console.assembly import Console
from egress_proxies.console.history import History
from egress_proxies.console.pools import register_pool_book
from egress_proxies.console.tally import RedisTally, open_tally

__all__ = [
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
]
