"""Runs one Pulumi stack per Proxy through the Automation API, off the event loop.

Every operation is a `pulumi` subprocess, so the runner keeps them few: one
shared PulumiCommand (one `pulumi version` per process lifetime), no
`stack select` (every command names its stack), and outputs read from the
backend's checkpoint file instead of `stack output` / `stack history`. An
`up` of an existing stack therefore starts exactly one CLI process, and a
first `up` two (`stack init` + `up`).

Work runs in a thread pool whose size is the runner's one concurrency
setting; each stack has a persistent work dir under the state dir (its
`Pulumi.<stack>.yaml` holds the passphrase salt: losing it loses the
stack's secrets).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.errors import EgressProxiesError
from egress_proxies.stacks.backend import FileBackend, StackState
from egress_proxies.stacks.naming import PROJECT

logger = logging.getLogger(__name__)

UID_CONFIG_KEY = f"{PROJECT}:proxyUid"
_ERROR_TAIL_CHARS = 4000


class StackOperationError(EgressProxiesError):
    """A pulumi operation failed; `text` is the tail of its output, for classification."""

    def __init__(self, operation: str, stack: str, text: str) -> None:
        super().__init__(f"pulumi {operation} of stack {stack} failed: {text[-1000:]}")
        self.operation = operation
        self.stack = stack
        self.text = text


@dataclass(frozen=True)
class RunnerSettings:
    """Where the stacks live and how pulumi is run."""

    state_dir: Path
    passphrase: str
    concurrency: int = 4
    pulumi_root: Path | None = None  # a directory with bin/pulumi; None = pulumi on PATH
    extra_env: Mapping[str, str] = field(default_factory=dict)


class _FileBackedStack(auto.Stack):
    """A Stack that never runs `stack select`, `stack output` or `stack history`."""

    def __init__(
        self, name: str, workspace: auto.LocalWorkspace, backend: FileBackend, clock: Clock
    ) -> None:
        self.name = name
        self.workspace = workspace
        self._backend = backend
        self._clock = clock

    def __repr__(self) -> str:
        return f"<FileBackedStack {self.name}>"

    def outputs(self) -> auto.OutputMap:
        state = self._backend.read(self.name)
        values = state.outputs if state else {}
        return {key: auto.OutputValue(value, value is None) for key, value in values.items()}

    def info(self, show_secrets: bool = True) -> auto.UpdateSummary | None:
        now = self._clock.utcnow()
        return auto.UpdateSummary(
            kind="update",
            start_time=now,
            message="",
            environment={},
            config={},
            result="succeeded",
            end_time=now,
        )


class StackRunner:
    """Creates, updates and destroys per-Proxy stacks on a file:// backend."""

    def __init__(self, settings: RunnerSettings, clock: Clock | None = None) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        state_dir = settings.state_dir.resolve()
        self.backend = FileBackend(state_dir / "backend", PROJECT)
        self._workspaces = state_dir / "workspaces"
        self._home = state_dir / "pulumi-home"
        for directory in (self.backend.root, self._workspaces, self._home):
            directory.mkdir(parents=True, exist_ok=True)
        self._pool = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="pulumi")
        self._locks: dict[str, asyncio.Lock] = {}
        self._command: auto.PulumiCommand | None = None
        self._command_lock = threading.Lock()
        self._running = 0

    def __repr__(self) -> str:
        return (
            f"<StackRunner {self.backend.url} [running: {self._running} | "
            f"concurrency: {self._settings.concurrency}]>"
        )

    def close(self) -> None:
        """Wait for running operations and release the thread pool."""
        self._pool.shutdown(wait=True)

    def state(self, stack: str) -> StackState | None:
        """The stack's checkpoint as the backend holds it (no CLI process)."""
        return self.backend.read(stack)

    async def up(
        self, stack: str, uid: str, program: Callable[[], None], *, refresh: bool = False
    ) -> Mapping[str, Any]:
        """Create or update the stack with `program`; return its outputs (secrets as None).

        `refresh` first reconciles the state with reality in the same pulumi
        process, for resources deleted out of band.
        """
        async with self._lock(stack):
            outputs: Mapping[str, Any] = await self._in_pool(self._up, stack, uid, program, refresh)
            return outputs

    async def destroy(self, stack: str) -> None:
        """Destroy every resource of the stack and remove it; a missing stack is done already."""
        async with self._lock(stack):
            await self._in_pool(self._destroy, stack)

    async def forget(self, stack: str) -> None:
        """Remove the stack from this backend and leave its resources running (`stack rm --force`).

        For a Proxy another shard has taken over: the resources are its now.
        """
        async with self._lock(stack):
            await self._in_pool(self._forget, stack)

    def _lock(self, stack: str) -> asyncio.Lock:
        return self._locks.setdefault(stack, asyncio.Lock())

    async def _in_pool(self, function: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        self._running += 1
        try:
            return await loop.run_in_executor(self._pool, function, *args)
        finally:
            self._running -= 1

    def _pulumi(self) -> auto.PulumiCommand:
        # Pool threads ask at once when the first operations start together; the
        # lock keeps it to one PulumiCommand and one `pulumi version` per process.
        with self._command_lock:
            if self._command is None:
                root = self._settings.pulumi_root
                self._command = auto.PulumiCommand(
                    root=str(root) if root else None, skip_version_check=True
                )
            return self._command

    def _env(self) -> dict[str, str]:
        return {
            "PULUMI_BACKEND_URL": self.backend.url,
            "PULUMI_CONFIG_PASSPHRASE": self._settings.passphrase,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS": "true",
            # The kubernetes provider applies server-side under a field manager
            # name of its own per run. An `up` killed after the API server created
            # an object but before the checkpoint recorded it leaves fields owned
            # by that run's manager; the next `up` must take them over (force), or
            # it fails with a field conflict for good once the spec has changed.
            # Every object a stack writes is named after its Proxy and owned by it.
            "PULUMI_K8S_ENABLE_PATCH_FORCE": "true",
            "PATH": os.environ.get("PATH", ""),
            **self._settings.extra_env,
        }

    def _workspace(self, stack: str, program: Callable[[], None] | None) -> auto.LocalWorkspace:
        work_dir = self._workspaces / stack
        work_dir.mkdir(parents=True, exist_ok=True)
        return auto.LocalWorkspace(
            work_dir=str(work_dir),
            pulumi_home=str(self._home),
            program=program,
            env_vars=self._env(),
            secrets_provider="passphrase",
            project_settings=auto.ProjectSettings(
                name=PROJECT,
                runtime="python",
                backend=auto.ProjectBackend(url=self.backend.url),
            ),
            pulumi_command=self._pulumi(),
        )

    def _up(
        self, stack: str, uid: str, program: Callable[[], None], refresh: bool
    ) -> Mapping[str, Any]:
        workspace = self._workspace(stack, program)
        self.backend.clear_stale_locks()
        try:
            if not self.backend.exists(stack):
                workspace.create_stack(stack)
            _set_uid_config(Path(str(workspace.work_dir)), stack, uid)
            handle = _FileBackedStack(stack, workspace, self.backend, self._clock)
            state = self.backend.read(stack)
            if state is not None and state.pending_operations:
                logger.warning("stack %s has unfinished operations; refreshing them away", stack)
                handle.refresh(clear_pending_creates=True)
            result = handle.up(color="never", refresh=refresh)
        except auto.CommandError as error:
            raise StackOperationError("up", stack, _error_text(error)) from None
        finally:
            self.backend.prune_history(stack)
        return {key: output.value for key, output in result.outputs.items()}

    def _destroy(self, stack: str) -> None:
        if not self.backend.exists(stack):
            return
        workspace = self._workspace(stack, _empty_program)
        self.backend.clear_stale_locks()
        handle = _FileBackedStack(stack, workspace, self.backend, self._clock)
        try:
            state = self.backend.read(stack)
            if state is not None and state.pending_operations:
                handle.refresh(clear_pending_creates=True)
            handle.destroy(color="never")
            workspace.remove_stack(stack)
        except auto.CommandError as error:
            raise StackOperationError("destroy", stack, _error_text(error)) from None

    def _forget(self, stack: str) -> None:
        if not self.backend.exists(stack):
            return
        workspace = self._workspace(stack, _empty_program)
        self.backend.clear_stale_locks()
        try:
            workspace.remove_stack(stack, force=True)
        except auto.CommandError as error:
            raise StackOperationError("forget", stack, _error_text(error)) from None


def _empty_program() -> None:
    """Destroy needs a program to attach to; it declares nothing."""


def _set_uid_config(work_dir: Path, stack: str, uid: str) -> None:
    """Record the Proxy UID in the stack's config file (keeping its encryption salt)."""
    path = work_dir / f"Pulumi.{stack}.yaml"
    settings = yaml.safe_load(path.read_text()) if path.exists() else None
    settings = settings or {}
    config = settings.setdefault("config", {})
    if config.get(UID_CONFIG_KEY) != uid:
        config[UID_CONFIG_KEY] = uid
        path.write_text(yaml.safe_dump(settings, sort_keys=True))


def _error_text(error: auto.CommandError) -> str:
    text = f"{getattr(error, 'stderr', '')}\n{getattr(error, 'stdout', '')}".strip() or str(error)
    return text[-_ERROR_TAIL_CHARS:]
