"""A malformed variable or flag ends the command with one line naming it, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MALFORMED_VARIABLES = [
    ("EGRESS_PROXIES_DISCOVERY_PORT", "abc"),
    ("EGRESS_PROXIES_DISCOVERY_PORT", "70000"),
    ("EGRESS_PROXIES_LEASE_STORE_TIMEOUT_SECONDS", "soon"),
    ("EGRESS_PROXIES_LEASE_STORE_TIMEOUT_SECONDS", "0"),
    ("EGRESS_PROXIES_DISCOVERY_ALLOW_NO_AUTH", "perhaps"),
]
COMMANDS = [["crd"], ["run"], ["discovery"], ["dev-cluster", "down", "--state-dir", "unused"]]


def command(*arguments: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """`egress-proxies ARGUMENTS` in a process of its own, with `variables` set."""
    return subprocess.run(
        [sys.executable, "-m", "egress_proxies.cli", *arguments],
        env={**os.environ, "EGRESS_PROXIES_LEASE_STORE": "memory", **variables},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(("variable", "value"), MALFORMED_VARIABLES)
def test_a_malformed_variable_exits_2_naming_it_and_its_form(variable: str, value: str) -> None:
    ended = command("crd", **{variable: value})

    assert (ended.returncode, ended.stdout) == (2, "")
    assert "Traceback" not in ended.stderr
    [line] = ended.stderr.splitlines()
    assert f"${variable}" in line and "expected" in line and repr(value) in line


@pytest.mark.parametrize("arguments", COMMANDS, ids=lambda arguments: arguments[0])
def test_every_command_reports_a_malformed_variable(arguments: list[str]) -> None:
    ended = command(*arguments, EGRESS_PROXIES_DISCOVERY_PORT="abc")

    assert ended.returncode == 2
    assert "Traceback" not in ended.stderr
    assert "$EGRESS_PROXIES_DISCOVERY_PORT" in ended.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--port", "70000"], "--port"),
        (["--lease-store-timeout", "0"], "--lease-store-timeout"),
        (["--lease-store", "ftp://files"], "--lease-store"),
    ],
)
def test_a_malformed_discovery_flag_exits_2_naming_it(flags: list[str], named: str) -> None:
    ended = command("discovery", *flags)

    assert ended.returncode == 2
    assert "Traceback" not in ended.stderr
    assert named in ended.stderr
