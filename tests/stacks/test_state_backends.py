"""The shared state backends with the real pulumi CLI: postgres:// on a real PostgreSQL,
s3:// on a real S3-compatible server (versitygw), both on loopback.

Each test gets a backend of its own (a table, a bucket) and runs the stack
runner as the operator does, then checks what the operator reads back, what
a second replica with an empty state dir can do, and what the host CLI sees.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import secrets
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import boto3
import psycopg
import pulumi
import pytest

from egress_proxies import toolchain
from egress_proxies.gc.sweeper import read_stack_records
from egress_proxies.stacks.backends import (
    BackendUnavailableError,
    StateBackend,
    parse_backend_url,
)
from egress_proxies.stacks.errors import StackOperationError
from egress_proxies.stacks.naming import PROJECT
from egress_proxies.stacks.runner import RunnerSettings, StackRunner
from harness.postgres import PostgresServer
from harness.s3 import S3Server
from harness.squid import free_ports

pytestmark = pytest.mark.integration


def program(value: str) -> None:
    pulumi.export("value", value)
    pulumi.export("token", pulumi.Output.secret(f"secret-{value}"))


@dataclass
class Shared:
    """One backend of this test's own: its URL, the variables its clients need, a raw writer."""

    kind: str
    url: str
    env: dict[str, str]
    put: Callable[[str, bytes], None]
    secret: str


def _postgres(server: PostgresServer) -> Shared:
    table = f"state_{secrets.token_hex(4)}"

    def put(key: str, value: bytes) -> None:
        with psycopg.connect(
            server.url.replace("postgres://", "postgresql://"),
            password=server.password,
            autocommit=True,
        ) as connection:
            connection.execute(
                f"INSERT INTO {table} (key, data) VALUES (%s, %s)",  # noqa: S608
                (f"postgres/{key}", json.dumps({"data": base64.b64encode(value).decode()})),
            )

    return Shared("postgres", f"{server.url}&table={table}", server.env, put, server.password)


def _s3(server: S3Server) -> Shared:
    bucket = f"stacks-{secrets.token_hex(4)}"
    server.create_bucket(bucket)

    def put(key: str, value: bytes) -> None:
        client = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
        )
        client.put_object(Bucket=bucket, Key=f"operator/{key}", Body=value)

    return Shared("s3", server.url(bucket, "operator"), server.env, put, server.secret_key)


@pytest.fixture(params=["postgres", "s3"])
def shared(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Shared:
    if request.param == "postgres":
        backend = _postgres(request.getfixturevalue("postgres_server"))
    else:
        backend = _s3(request.getfixturevalue("s3_server"))
    for name, value in backend.env.items():
        monkeypatch.setenv(name, value)
    return backend


def settings_for(shared: Shared, state_dir: Path, passphrase: str) -> RunnerSettings:
    return RunnerSettings(
        state_dir=state_dir,
        passphrase=passphrase,
        state_backend=parse_backend_url(shared.url),
        pulumi_root=toolchain.cache_dir(),
        extra_env={"PATH": str(toolchain.bin_dir())},
    )


@pytest.fixture
def passphrase() -> str:
    return secrets.token_urlsafe(16)


@pytest.fixture
async def runner(shared: Shared, tmp_path: Path, passphrase: str) -> AsyncIterator[StackRunner]:
    runner = StackRunner(settings_for(shared, tmp_path / "replica-a", passphrase))
    try:
        yield runner
    finally:
        await runner.close()


def host_cli(
    shared: Shared, passphrase: str, cwd: Path, *args: str, backend: str | None = None
) -> str:
    """The pulumi CLI as an operator's laptop runs it: URL, credentials, passphrase."""
    env = {
        "PATH": f"{toolchain.bin_dir()}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(cwd),
        "PULUMI_HOME": str(cwd.parent / ".pulumi-home"),
        "PULUMI_BACKEND_URL": backend or shared.url,
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        **shared.env,
    }
    done = subprocess.run(
        [str(toolchain.find("pulumi")), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout


async def test_create_update_read_and_destroy(runner: StackRunner) -> None:
    stack = "ns.create-update"
    outputs = await runner.up(stack, "uid-1", functools.partial(program, "a"))
    assert outputs["value"] == "a"
    backend: StateBackend = runner.backend
    assert backend.stacks() == [stack]
    state = await runner.state(stack)
    assert state is not None
    assert state.outputs["value"] == "a"
    assert state.outputs["token"] is None, "a secret output is never read back"
    assert not backend.locked(stack), "the CLI released its lock"

    await runner.up(stack, "uid-1", functools.partial(program, "b"))
    state = await runner.state(stack)
    assert state is not None
    assert state.outputs["value"] == "b"
    [record] = read_stack_records(backend)
    assert record.name == stack

    await runner.destroy(stack)
    assert backend.stacks() == []
    assert await runner.state(stack) is None


async def test_a_replica_with_an_empty_state_dir_updates_every_stack_and_the_host_cli_lists_them(
    shared: Shared, runner: StackRunner, passphrase: str, tmp_path: Path
) -> None:
    stacks = ["ns.one", "ns.two"]
    for stack in stacks:
        await runner.up(stack, f"uid-{stack}", functools.partial(program, "first"))

    other = StackRunner(settings_for(shared, tmp_path / "replica-b", passphrase))
    try:
        assert not (tmp_path / "replica-b" / "workspaces" / "ns.one").exists()
        outputs = await other.up("ns.one", "uid-ns.one", functools.partial(program, "second"))
        assert outputs["value"] == "second"
        await other.destroy("ns.two")
    finally:
        await other.close()

    laptop = tmp_path / "laptop"
    laptop.mkdir()
    listing = json.loads(host_cli(shared, passphrase, laptop, "stack", "ls", "--all", "--json"))
    assert [entry["name"] for entry in listing] == [f"organization/{PROJECT}/ns.one"]
    exported = json.loads(
        host_cli(
            shared,
            passphrase,
            laptop,
            "stack",
            "export",
            "--show-secrets",
            "--stack",
            f"organization/{PROJECT}/ns.one",
        )
    )
    [stack_resource] = [
        r for r in exported["deployment"]["resources"] if r["type"] == "pulumi:pulumi:Stack"
    ]
    assert stack_resource["outputs"]["token"]["plaintext"] == '"secret-second"', (
        "the secret written by the second replica decrypts with the same passphrase"
    )


def test_only_a_lock_whose_holder_is_provably_gone_is_cleared(
    shared: Shared, tmp_path: Path
) -> None:
    backend = settings_for(shared, tmp_path, "x").backend()
    backend.check()
    hostname = socket.gethostname()
    live = subprocess.Popen(["bash", "-c", "exec -a pulumi sleep 300"])  # noqa: S607
    dead = subprocess.Popen(["true"])  # noqa: S607
    dead.wait()
    try:
        prefix = f".pulumi/locks/organization/{PROJECT}"
        shared.put(f"{prefix}/ns.dead/a.json", _lock(dead.pid, hostname))
        shared.put(f"{prefix}/ns.live/b.json", _lock(live.pid, hostname))
        shared.put(f"{prefix}/ns.elsewhere/c.json", _lock(dead.pid, "another-pod"))

        assert backend.clear_stale_locks() == ["ns.dead"]

        assert not backend.locked("ns.dead")
        assert backend.locked("ns.live"), "a live pulumi keeps its lock"
        assert backend.locked("ns.elsewhere"), "a holder on another host is not judged here"
    finally:
        live.kill()
        live.wait()


def _lock(pid: int, hostname: str) -> bytes:
    return json.dumps(
        {"pid": pid, "username": "x", "hostname": hostname, "timestamp": "2026-01-01T00:00:00Z"}
    ).encode()


async def test_the_gc_inventory_lists_every_stack_in_one_read(runner: StackRunner) -> None:
    names = [f"ns.gc-{i}" for i in range(3)]
    for name in names:
        await runner.up(name, f"uid-{name}", functools.partial(program, name))
    records = read_stack_records(runner.backend)
    assert [r.name for r in records] == names
    assert runner.backend.stacks() == names


def _unreachable(shared: Shared) -> str:
    [port] = free_ports(1)
    if shared.kind == "postgres":
        return f"postgres://pulumi@127.0.0.1:{port}/postgres?sslmode=disable&connect_timeout=2"
    return (
        f"s3://nowhere?endpoint=http://127.0.0.1:{port}&region=us-east-1"
        "&use_path_style=true&disable_https=true"
    )


async def test_bad_backends_fail_with_one_line_without_the_secret_and_write_nothing(
    shared: Shared, tmp_path: Path, passphrase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = "PGPASSWORD" if shared.kind == "postgres" else "AWS_SECRET_ACCESS_KEY"
    wrong = "wrong-" + secrets.token_hex(6)
    monkeypatch.setenv(variable, wrong)
    runner = StackRunner(settings_for(shared, tmp_path / "state", passphrase))
    try:
        with pytest.raises(BackendUnavailableError) as refused:
            runner.backend.check()
        message = str(refused.value)
        assert "\n" not in message
        assert wrong not in message
        assert ("password authentication failed" in message) or ("denied" in message)
        with pytest.raises(StackOperationError) as failed:
            await runner.up("ns.refused", "uid-1", functools.partial(program, "a"))
        assert wrong not in str(failed.value)
    finally:
        await runner.close()
    monkeypatch.setenv(variable, shared.secret)
    assert StackRunner(settings_for(shared, tmp_path / "s2", passphrase)).backend.stacks() == []

    unreachable = parse_backend_url(_unreachable(shared))
    settings = RunnerSettings(
        state_dir=tmp_path / "u", passphrase=passphrase, state_backend=unreachable
    )
    with pytest.raises(BackendUnavailableError) as unreached:
        settings.backend().check()
    assert "\n" not in str(unreached.value)


def test_a_missing_bucket_is_named(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    url = parse_backend_url(s3_server.url("no-such-bucket"))
    settings = RunnerSettings(state_dir=Path("/nonexistent"), passphrase="x", state_backend=url)
    with pytest.raises(BackendUnavailableError, match="bucket no-such-bucket does not exist"):
        settings.backend().check()


def test_a_missing_table_is_created_as_pulumi_would(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in postgres_server.env.items():
        monkeypatch.setenv(name, value)
    url = parse_backend_url(f"{postgres_server.url}&table=fresh_{secrets.token_hex(4)}")
    backend = RunnerSettings(
        state_dir=Path("/nonexistent"), passphrase="x", state_backend=url
    ).backend()
    assert backend.stacks() == [], "a table pulumi has not created yet reads as empty"
    backend.check()
    assert backend.stacks() == []


async def test_the_documented_move_from_file_to_a_shared_backend(
    shared: Shared, passphrase: str, tmp_path: Path
) -> None:
    """docs/operations.md "Moving from file://": export from each work dir, init, import."""
    state = tmp_path / "state"
    old = StackRunner(
        RunnerSettings(
            state_dir=state,
            passphrase=passphrase,
            pulumi_root=toolchain.cache_dir(),
            extra_env={"PATH": str(toolchain.bin_dir())},
        )
    )
    try:
        await old.up("ns.moved", "uid-moved", functools.partial(program, "kept"))
    finally:
        await old.close()
    old_url = f"file://{state / 'backend'}"
    work = state / "workspaces" / "ns.moved"
    stack = f"organization/{PROJECT}/ns.moved"
    dump = tmp_path / "ns.moved.json"
    cli = functools.partial(host_cli, shared, passphrase, work)
    cli("stack", "export", "--stack", stack, "--file", str(dump), backend=old_url)
    cli("stack", "init", stack, "--secrets-provider", "passphrase")
    cli("stack", "import", "--stack", stack, "--file", str(dump))

    new = StackRunner(settings_for(shared, tmp_path / "new-state", passphrase))
    try:
        state_read = await new.state("ns.moved")
        assert state_read is not None
        assert state_read.outputs["value"] == "kept"
        outputs = await new.up("ns.moved", "uid-moved", functools.partial(program, "after"))
        assert outputs["value"] == "after"
    finally:
        await new.close()
