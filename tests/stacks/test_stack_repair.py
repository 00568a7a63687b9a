"""A pulumi CLI killed while it wrote leaves damaged files; the next operation repairs them.

The CLI's blob library writes each `<file>.attrs` sidecar in place. A
SIGKILL between creating and filling one (seen in the crash-convergence
test) leaves it empty, and pulumi then fails every command on that stack
with `failed to load checkpoint: EOF`. These tests put the backend in that
state with the real CLI and check the next `up` and `destroy` succeed.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pulumi
import pytest

from egress_proxies import toolchain
from egress_proxies.stacks.backends import FileBackend
from egress_proxies.stacks.runner import RunnerSettings, StackRunner

pytestmark = pytest.mark.integration


def exporting_program(value: str) -> None:
    pulumi.export("value", value)


@pytest.fixture
def runner_settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(
        state_dir=tmp_path / "state",
        passphrase=secrets.token_urlsafe(16),
        pulumi_root=toolchain.cache_dir(),
        extra_env={"PATH": str(toolchain.bin_dir())},
    )


@pytest.fixture
async def runner(runner_settings: RunnerSettings) -> AsyncIterator[StackRunner]:
    runner = StackRunner(runner_settings)
    try:
        yield runner
    finally:
        await runner.close()


def file_backend(settings: RunnerSettings) -> FileBackend:
    backend = settings.backend()
    assert isinstance(backend, FileBackend)
    return backend


def stack_dir(backend: FileBackend) -> Path:
    return backend.root / ".pulumi" / "stacks" / backend.project


async def test_an_empty_checkpoint_sidecar_is_deleted_and_the_next_up_succeeds(
    runner: StackRunner, runner_settings: RunnerSettings
) -> None:
    stack = "repair.sidecar"
    assert (await runner.up(stack, "uid-1", functools.partial(exporting_program, "a")))[
        "value"
    ] == "a"
    backend = file_backend(runner_settings)
    sidecar = stack_dir(backend) / f"{stack}.json.attrs"
    assert json.loads(sidecar.read_text()), "pulumi writes a sidecar beside the checkpoint"
    sidecar.write_text("")  # what a SIGKILL between create and write leaves
    leftover = stack_dir(backend) / f"{stack}.json.18edd155556d871e.tmp"
    leftover.write_text("{")  # the temp file of a checkpoint write that never got renamed

    outputs = await runner.up(stack, "uid-1", functools.partial(exporting_program, "b"))

    assert outputs["value"] == "b"
    assert not leftover.exists()
    assert json.loads(sidecar.read_text()), "the next write puts a whole sidecar back"
    sidecar.write_text('{"truncated')
    await runner.destroy(stack)
    assert not backend.exists(stack)


def test_without_the_repair_pulumi_fails_on_an_empty_sidecar(
    runner_settings: RunnerSettings,
) -> None:
    """The failure `repair` exists for, shown with the plain CLI (so the test above means it)."""
    backend = file_backend(runner_settings)
    env = {
        "PULUMI_BACKEND_URL": backend.url,
        "PULUMI_CONFIG_PASSPHRASE": runner_settings.passphrase,
        "PULUMI_HOME": str(runner_settings.pulumi_home()),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PATH": os.environ["PATH"],
    }
    work = runner_settings.workspaces() / "plain"
    work.mkdir()
    (work / "Pulumi.yaml").write_text(f"name: {backend.project}\nruntime: python\n")
    pulumi_cli = str(toolchain.find("pulumi"))
    subprocess.run(
        [pulumi_cli, "stack", "init", "plain", "--secrets-provider", "passphrase"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
    )
    (stack_dir(backend) / "plain.json.attrs").write_text("")
    shown = subprocess.run(
        [pulumi_cli, "stack", "export", "--stack", "plain"],
        cwd=work,
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert shown.returncode != 0
    assert "EOF" in shown.stderr, shown.stderr
    assert [path.name for path in backend.repair("plain")] == ["plain.json.attrs"]
    exported = subprocess.run(
        [pulumi_cli, "stack", "export", "--stack", "plain"],
        cwd=work,
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert exported.returncode == 0, exported.stderr
