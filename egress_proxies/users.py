"""Who this process runs as, when the image's user has no /etc/passwd entry."""

from __future__ import annotations

import getpass
import os


def user_name() -> str:
    """The login name, else the numeric uid.

    The operator image runs as uid 65532, which its /etc/passwd does not list
    (as distroless images do); getpass then finds no name and raises.
    """
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
