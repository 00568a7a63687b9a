"""A malformed variable or flag ends the command with one line naming it, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import BaseModel

from egress_proxies import cli
from egress_proxies.operator import main
from egress_proxies.settings import (
    DevClusterDownSettings,
    DevClusterUpSettings,
    DiscoverySettings,
    RunSettings,
    flag_of,
    form_of,
    variables_of,
)
from egress_proxies.tier import app as tier_app

pytestmark = pytest.mark.unit

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


# A malformed value of each option that can be malformed; every other option takes any text.
MALFORMED = {
    "concurrency": "0",
    "stack_worker_idle": "-1",
    "stack_worker_operations": "many",
    "liveness_port": "70000",
    "discovery_port": "abc",
    "discovery_allow_no_auth": "perhaps",
    "console_port": "70000",
    "console_tokens_dir": "/nonexistent/console-users",
    "metrics_port": "-1",
    "trace_health_probes": "perhaps",
    "lease_store": "ftp://files",
    "lease_store_timeout": "0",
    "lease_max_ttl": "an hour",
    "lease_cooldown": "soon",
    "lease_rate_limit_cooldown": "soon",
    "lease_ban_backoff_cap": "soon",
    "lease_pace_start": "fast",
    "lease_pace_floor": "slow",
    "lease_pace_ceiling": "fast",
    "lease_target_bounds": "[{",
    "gc_interval": "0",
    "gc_min_age": "-1",
    "gc_allow_namespaced": "perhaps",
    "retry_base": "0",
    "retry_cap": "soon",
    "instance_start_timeout": "0",
    "instance_ready_timeout": "soon",
    "gce_watch_interval": "0",
    "priority": "high",
    "shard_selector": "shard in (a",
    "shard_name": "Not_A_Name",
    "standalone": "perhaps",
    "priority_by_start": "perhaps",
    "peering_lifetime": "5",
    "squid_image": "",
    "proxy_discovery_url": "egress-proxies:8090",
    "state_backend": "postgres://pulumi:hunter2@db/state",
}
ANY_TEXT = {
    "kubeconfig",
    "state_dir",
    "namespaces",
    "squid_image",  # any text but the empty flag (an empty variable is unset)
    "discovery_host",
    "discovery_tokens_dir",
    "console_host",
    "lease_store_prefix",
    "gcp_project",
    "peering",
    "pod_namespace",
    "detach",  # a flag without a value
    "crds",
}
MODELS: dict[str, type[BaseModel]] = {
    "run": RunSettings,
    "discovery": DiscoverySettings,
    "dev-cluster up": DevClusterUpSettings,
    "dev-cluster down": DevClusterDownSettings,
}
FIELDS = [(command, name) for command, model in MODELS.items() for name in model.model_fields]


@pytest.fixture
def no_option_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for model in (RunSettings, DiscoverySettings):
        for name in model.model_fields:
            for variable in variables_of(model, name):
                monkeypatch.delenv(variable, raising=False)


def test_every_option_is_classified() -> None:
    for _, name in FIELDS:
        assert name in MALFORMED or name in ANY_TEXT, name


def one_error_line(capsys: pytest.CaptureFixture[str], arguments: list[str]) -> str:
    """The single line `egress-proxies ARGUMENTS` ends with, in this process."""
    with pytest.raises(SystemExit) as exited:
        code = cli.main(arguments)
        raise SystemExit(code)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    [line] = captured.err.splitlines()
    assert line.startswith("egress-proxies: error: ")
    return line


def never_started(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("started with a malformed option")

    monkeypatch.setattr(main, "Operator", refuse)
    monkeypatch.setattr(tier_app, "run_tier", refuse)


def has_variable(command: str, name: str) -> bool:
    return bool(variables_of(MODELS[command], name))


def is_switch(command: str, name: str) -> bool:
    return MODELS[command].model_fields[name].annotation is bool


# A switch's flag takes no value; the shard's options are checked as the operator starts,
# so only `run` reports them; an empty variable is unset, not malformed.
MALFORMED_FLAGS = [f for f in FIELDS if f[1] in MALFORMED and not is_switch(*f)]
MALFORMED_OPTION_VARIABLES = [
    (command, name, run_as)
    for command, name in FIELDS
    if MALFORMED.get(name) and has_variable(command, name)
    for run_as in ("itself", "crd")
    if not (run_as == "crd" and name.startswith("shard_"))
]


@pytest.mark.usefixtures("no_option_variables")
@pytest.mark.parametrize(("command", "name"), MALFORMED_FLAGS)
def test_every_malformed_flag_exits_2_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, name: str
) -> None:
    model = MODELS[command]
    never_started(monkeypatch)
    monkeypatch.setenv("EGRESS_PROXIES_LEASE_STORE", "memory")

    line = one_error_line(capsys, [*command.split(), f"{flag_of(model, name)}={MALFORMED[name]}"])

    assert flag_of(model, name) in line


@pytest.mark.usefixtures("no_option_variables")
@pytest.mark.parametrize(("command", "name", "run_as"), MALFORMED_OPTION_VARIABLES)
def test_every_malformed_variable_exits_2_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    name: str,
    run_as: str,
) -> None:
    model = MODELS[command]
    never_started(monkeypatch)
    if name != "lease_store":
        monkeypatch.setenv("EGRESS_PROXIES_LEASE_STORE", "memory")
    variable = variables_of(model, name)[0]
    monkeypatch.setenv(variable, MALFORMED[name])

    line = one_error_line(capsys, command.split() if run_as == "itself" else ["crd"])

    if name.startswith("shard_"):
        assert flag_of(model, name) in line  # ShardError names the flag
    else:
        assert f"${variable}" in line
    if "text" not in form_of(model.model_fields[name]):
        assert "expected" in line and repr(MALFORMED[name]) in line


@pytest.mark.usefixtures("no_option_variables")
@pytest.mark.parametrize(
    "url",
    [
        "postgres://pulumi:hunter2@db:5432/state",
        "s3://key:hunter2@bucket/prefix",
        "s3://bucket?endpoint=ftp://x&hunter2",
        "gs:///prefix-hunter2",
        "azblob://account:hunter2@container",
        "mysql://u:hunter2@db",
    ],
)
def test_a_bad_state_backend_is_one_line_that_never_shows_a_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    never_started(monkeypatch)
    line = one_error_line(capsys, ["run", f"--state-backend={url}"])
    assert "--state-backend" in line
    if ":hunter2@" in url:
        assert "hunter2" not in line
        assert ":***@" in line
