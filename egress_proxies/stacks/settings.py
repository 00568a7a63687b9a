"""Where the stacks live and how pulumi is run: one value, shared by the runner and its worker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from egress_proxies.stacks.backends import BackendUrl, StateBackend, open_backend
from egress_proxies.stacks.naming import PROJECT


@dataclass(frozen=True)
class RunnerSettings:
    """Where the stacks live and how pulumi is run.

    `worker_idle` > 0 runs the operations in a worker process
    (`worker_module`) that exits after that many idle seconds, or after
    `worker_operations` operations, and so returns the memory an Automation
    API run leaves behind; 0 runs them in threads of this process.
    `state_backend` None keeps the stacks in a file:// backend under the
    state dir; otherwise the state dir holds only what a new pod re-creates.
    """

    state_dir: Path
    passphrase: str
    state_backend: BackendUrl | None = None
    concurrency: int = 4
    pulumi_root: Path | None = None  # a directory with bin/pulumi; None = pulumi on PATH
    extra_env: Mapping[str, str] = field(default_factory=dict)
    worker_idle: float = 0.0
    worker_operations: int = 200
    worker_module: str = "egress_proxies.stacks.worker_main"  # run as `python -m`

    def __repr__(self) -> str:
        return (
            f"RunnerSettings(state_dir={self.state_dir!r}, passphrase=<redacted>, "
            f"state_backend={self.backend_url()!r}, "
            f"concurrency={self.concurrency}, pulumi_root={self.pulumi_root!r}, "
            f"worker_idle={self.worker_idle:g}, worker_operations={self.worker_operations})"
        )

    def backend_url(self) -> str:
        """The backend URL as pulumi is given it (no password in it)."""
        if self.state_backend is not None:
            return self.state_backend.text
        return f"file://{self.state_dir.resolve() / 'backend'}"

    def backend(self) -> StateBackend:
        """The reader of the stacks' backend (a file:// one is created if missing)."""
        return open_backend(self.state_backend, self.state_dir, PROJECT)

    def workspaces(self) -> Path:
        """The parent of every stack's work dir (created if missing)."""
        return _directory(self.state_dir.resolve() / "workspaces")

    def pulumi_home(self) -> Path:
        """PULUMI_HOME for every operation (created if missing)."""
        return _directory(self.state_dir.resolve() / "pulumi-home")


def _directory(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
