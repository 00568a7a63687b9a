"""The stack operations themselves: `up`, `destroy` and `forget`, blocking, in one thread each.

Every operation is a `pulumi` subprocess, so they are kept few: one shared
PulumiCommand (one `pulumi version` per process lifetime), no `stack
select` (every command names its stack), and outputs read from the
backend's checkpoint file instead of `stack output` / `stack history`. An
`up` of an existing stack therefore starts exactly one CLI process, and a
first `up` two (`stack init` + `up`).

Each stack has a work dir under the state dir. Nothing in it has to
survive the pod: its `Pulumi.<stack>.yaml` is re-created on every `up`, and
with `PULUMI_FALLBACK_TO_STATE_SECRETS_MANAGER` pulumi takes the passphrase
salt from the stack's checkpoint when the file has none, so a replica on
another node with the same passphrase reads and updates every stack.
`StackRunner` calls these from its threads or from its worker process
(`stacks.worker`); everything here and everything passed in can be pickled
for the latter.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from egress_proxies.stacks.backends import BackendUnavailableError, StateBackend
from egress_proxies.stacks.errors import StackOperationError
from egress_proxies.stacks.naming import PROJECT
from egress_proxies.stacks.settings import RunnerSettings
from egress_proxies.users import user_name

logger = logging.getLogger(__name__)

UID_CONFIG_KEY = f"{PROJECT}:proxyUid"
_ERROR_TAIL_CHARS = 4000


class _FileBackedStack(auto.Stack):
    """A Stack that never runs `stack select`, `stack output` or `stack history`.

    It skips `Stack.__init__` (`stack select`) and replaces `outputs()` and
    `info()`, which pulumi's `up`, `refresh` and `destroy` call after the
    command: the public API would start three more CLI processes per
    operation. This leans on pulumi internals on purpose;
    tests/stacks/test_file_backed_stack.py pins what it leans on and fails on a
    pulumi upgrade that changes it.
    """

    def __init__(self, name: str, workspace: auto.LocalWorkspace, backend: StateBackend) -> None:
        self.name = name
        self.workspace = workspace
        self._backend = backend

    def __repr__(self) -> str:
        return f"<FileBackedStack {self.name}>"

    def outputs(self) -> auto.OutputMap:
        state = self._backend.read(self.name)
        values = state.outputs if state else {}
        return {key: auto.OutputValue(value, value is None) for key, value in values.items()}

    def info(self, show_secrets: bool = True) -> auto.UpdateSummary | None:
        """No update history is read: a stand-in summary, which nothing here uses.

        pulumi calls it only after the command exited 0, hence "succeeded";
        its times are when it was called. Callers read `outputs` only.
        """
        now = datetime.datetime.now(datetime.UTC)
        return auto.UpdateSummary(
            kind="update",
            start_time=now,
            message="",
            environment={},
            config={},
            result="succeeded",
            end_time=now,
        )


class StackOperations:
    """Blocking stack operations on the state backend; safe to call from several threads."""

    def __init__(self, settings: RunnerSettings) -> None:
        self._settings = settings
        self.backend = settings.backend()
        self._url = settings.backend_url()
        self._workspaces = settings.workspaces()
        self._home = settings.pulumi_home()
        self._command: auto.PulumiCommand | None = None
        self._command_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<StackOperations {self._url}>"

    def up(
        self, stack: str, uid: str, program: Callable[[], None], refresh: bool
    ) -> Mapping[str, Any]:
        """Create or update the stack with `program`; its outputs (secrets as None)."""
        with _backend_failures("up", stack):
            return self._up(stack, uid, program, refresh)

    def destroy(self, stack: str) -> None:
        """Destroy every resource of the stack and remove it; a missing stack is done already."""
        with _backend_failures("destroy", stack):
            self._destroy(stack)

    def forget(self, stack: str) -> None:
        """Remove the stack from the backend and leave its resources (`stack rm --force`)."""
        with _backend_failures("forget", stack):
            self._forget(stack)

    def _up(
        self, stack: str, uid: str, program: Callable[[], None], refresh: bool
    ) -> Mapping[str, Any]:
        workspace = self._workspace(stack, program)
        self.backend.clear_stale_locks()
        self.backend.repair(stack)
        try:
            if not self.backend.exists(stack):
                workspace.create_stack(stack)
            _set_uid_config(Path(str(workspace.work_dir)), stack, uid)
            handle = _FileBackedStack(stack, workspace, self.backend)
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
        self.backend.repair(stack)
        handle = _FileBackedStack(stack, workspace, self.backend)
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
        self.backend.repair(stack)
        try:
            workspace.remove_stack(stack, force=True)
        except auto.CommandError as error:
            raise StackOperationError("forget", stack, _error_text(error)) from None

    def _pulumi(self) -> auto.PulumiCommand:
        # Threads ask at once when the first operations start together; the
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
            "PULUMI_BACKEND_URL": self._url,
            # A work dir re-created on a new pod has no passphrase salt of its
            # own: take the one the stack's checkpoint records.
            "PULUMI_FALLBACK_TO_STATE_SECRETS_MANAGER": "true",
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
            # The pulumi CLI (a static build) names the stack's creator from
            # $USER: without it and without a passwd entry it cannot create a stack.
            "USER": os.environ.get("USER") or user_name(),
            **self._credentials(),
            **self._settings.extra_env,
        }

    def _credentials(self) -> dict[str, str]:
        """The backend's credential variables from this process's environment (a Secret's)."""
        url = self._settings.state_backend
        names = url.credential_variables if url is not None else ()
        return {name: os.environ[name] for name in names if name in os.environ}

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
                backend=auto.ProjectBackend(url=self._url),
            ),
            pulumi_command=self._pulumi(),
        )


@contextlib.contextmanager
def _backend_failures(operation: str, stack: str) -> Iterator[None]:
    """A backend the operator cannot read fails the operation as pulumi failing would (retried)."""
    try:
        yield
    except BackendUnavailableError as error:
        raise StackOperationError(operation, stack, str(error)) from None


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
