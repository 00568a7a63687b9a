"""Where the stacks live and how pulumi is run: one value, shared by the runner and its worker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from egress_proxies.stacks.backend import FileBackend
from egress_proxies.stacks.naming import PROJECT


@dataclass(frozen=True)
class RunnerSettings:
    """Where the stacks live and how pulumi is run.

    `worker_idle` > 0 runs the operations in a worker process
    (`worker_module`) that exits after that many idle seconds, or after
    `worker_operations` operations, and so returns the memory an Automation
    API run leaves behind; 0 runs them in threads of this process.
    """

    state_dir: Path
    passphrase: str
    concurrency: int = 4
    pulumi_root: Path | None = None  # a directory with bin/pulumi; None = pulumi on PATH
    extra_env: Mapping[str, str] = field(default_factory=dict)
    worker_idle: float = 0.0
    worker_operations: int = 200
    worker_module: str = "egress_proxies.stacks.worker_main"  # run as `python -m`

    def __repr__(self) -> str:
        return (
            f"RunnerSettings(state_dir={self.state_dir!r}, passphrase=<redacted>, "
            f"concurrency={self.concurrency}, pulumi_root={self.pulumi_root!r}, "
            f"worker_idle={self.worker_idle:g}, worker_operations={self.worker_operations})"
        )

    def backend(self) -> FileBackend:
        """The file:// backend under the state dir (created if missing)."""
        backend = FileBackend(self.state_dir.resolve() / "backend", PROJECT)
        backend.root.mkdir(parents=True, exist_ok=True)
        return backend

    def workspaces(self) -> Path:
        """The parent of every stack's work dir (created if missing)."""
        return _directory(self.state_dir.resolve() / "workspaces")

    def pulumi_home(self) -> Path:
        """PULUMI_HOME for every operation (created if missing)."""
        return _directory(self.state_dir.resolve() / "pulumi-home")


def _directory(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
