"""Running the real operator (`egress-proxies run`) as a child process, for tests and benchmarks."""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from egress_proxies import toolchain
from egress_proxies.devcluster.controlplane import free_port
from egress_proxies.devcluster.node import image_ref
from egress_proxies.devcluster.processes import Child
from egress_proxies.kube import KubeClient, NotFoundError
from egress_proxies.kube.resources import PROXIES, SECRETS
from harness.cluster import wait_for
from harness.process import ManagedProcess


@dataclass
class OperatorProcess(ManagedProcess):
    """One `egress-proxies run` child, restricted to one namespace, with a counting pulumi."""

    namespace: str
    state_dir: Path
    log: Path
    pulumi_calls: Path
    env: dict[str, str]
    discovery_url: str
    discovery_token: str
    metrics_url: str
    child: Child | None = None
    starts: int = field(default=0)
    args: list[str] = field(default_factory=list)  # more `run` flags, e.g. --shard-selector
    graceful_stop: float | None = 30.0  # kopf shuts down cleanly on SIGTERM

    def start(self) -> None:
        """Start (or restart) the operator."""
        self.starts += 1
        self._spawn(
            f"operator-{self.starts}",
            [
                sys.executable,
                "-m",
                "egress_proxies.cli",
                "run",
                "--namespace",
                self.namespace,
                *self.args,
            ],
            pid_dir=self.state_dir / "test-pids",
            env=self.env,
        )

    def kill(self) -> None:
        """SIGKILL the operator and every descendant (pulumi runs plugins in their own groups)."""
        if self.child is not None:
            family = descendants(self.child.process.pid)
            os.killpg(self.child.process.pid, signal.SIGKILL)
            for pid in family:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.child.process.wait(timeout=10)

    def pulumi_invocations(self) -> list[str]:
        """Every pulumi CLI command line the operator ran so far."""
        if not self.pulumi_calls.exists():
            return []
        return self.pulumi_calls.read_text().splitlines()


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def counting_pulumi_root(
    directory: Path, calls: Path, joins: Mapping[str, Path] | None = None
) -> Path:
    """A pulumi root whose bin/pulumi logs each invocation, then runs the real CLI.

    `joins` maps `pulumi` and plugin binaries to a cgroup's `cgroup.procs`:
    each is wrapped to join that cgroup before it execs the real binary (the
    plugin wrappers come first on the PATH pulumi finds its plugins on).
    """
    joins = joins or {}
    plugins = directory / "plugins"
    for name, procs in joins.items():
        if name != "pulumi":
            plugins.mkdir(parents=True, exist_ok=True)
            _wrapper(plugins / name, f'echo $$ > {procs}\nexec {toolchain.find(name)} "$@"')
    lines = [f'echo "$*" >> {calls}']
    if "pulumi" in joins:
        lines.append(f"echo $$ > {joins['pulumi']}")
    if plugins.is_dir():
        lines.append(f'PATH="{plugins}:$PATH"; export PATH')
    lines.append(f'exec {toolchain.find("pulumi")} "$@"')
    (directory / "bin").mkdir(parents=True)
    _wrapper(directory / "bin" / "pulumi", "\n".join(lines))
    return directory


def _wrapper(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def new_operator(
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    extra_env: dict[str, str] | None = None,
    pulumi_joins: Mapping[str, Path] | None = None,
) -> OperatorProcess:
    """An operator (not started yet) watching `namespace`, its state under `tmp_path`.

    `pulumi_joins`: cgroups its pulumi processes join (`counting_pulumi_root`).
    """
    state = tmp_path / "operator-state"
    calls = tmp_path / "pulumi-calls.log"
    tokens = tmp_path / "discovery-tokens"
    tokens.mkdir()
    token = secrets.token_urlsafe(24)
    (tokens / "crawler").write_text(token)
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "EGRESS_PROXIES_STATE_DIR": str(state),
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16),
        "EGRESS_PROXIES_PULUMI_ROOT": str(
            counting_pulumi_root(tmp_path / "pulumi-root", calls, pulumi_joins)
        ),
        "EGRESS_PROXIES_LOG_LEVEL": "INFO",
        "EGRESS_PROXIES_GC_ALLOW_NAMESPACED": "true",
        "EGRESS_PROXIES_DISCOVERY_HOST": "127.0.0.1",
        "EGRESS_PROXIES_DISCOVERY_PORT": str(port),
        "EGRESS_PROXIES_DISCOVERY_TOKENS_DIR": str(tokens),
        "EGRESS_PROXIES_METRICS_PORT": str(metrics_port),
        # Nothing is pulled here: the dev cluster's squid image, built locally.
        "EGRESS_PROXIES_SQUID_IMAGE": image_ref("squid"),
        **(extra_env or {}),
    }
    return OperatorProcess(
        namespace,
        state,
        tmp_path / "operator.log",
        calls,
        env,
        discovery_url=f"http://127.0.0.1:{port}",
        discovery_token=token,
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
    )


# A spec change that shapes a kubernetes Proxy's pod (so replaces it) and that
# any node can run: other resources, the same image.
RESHAPED = {
    "resources": {
        "requests": {"cpu": "60m", "memory": "64Mi"},
        "limits": {"cpu": "1", "memory": "256Mi"},
    }
}


def proxy_path(namespace: str, name: str = "") -> str:
    """The Proxies of `namespace`, or one of them."""
    return PROXIES.path(namespace, name or None)


def managed_proxy(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": PROXIES.api_version,
        "kind": "Proxy",
        "metadata": {"name": name},
        "spec": {"provider": "kubernetes", "kubernetes": {}, **spec},
    }


async def proxy_credentials(kube: KubeClient, namespace: str, body: dict[str, Any]) -> str:
    """`user:password` of a managed Proxy, from its credentials Secret."""
    secret_name = body["status"]["credentialsSecret"]
    secret = await kube.get(SECRETS.path(namespace, secret_name))
    user = base64.b64decode(secret["data"]["username"]).decode()
    password = base64.b64decode(secret["data"]["password"]).decode()
    return f"{user}:{password}"


async def wait_for_condition(
    kube: KubeClient,
    namespace: str,
    name: str,
    kind: str,
    status: str,
    reason: str | None = None,
    timeout: float = 120,
) -> dict[str, Any]:
    """Poll the Proxy until a condition has the given status (and reason)."""

    async def matches() -> dict[str, Any] | None:
        body = await kube.get(proxy_path(namespace, name))
        for condition in (body.get("status") or {}).get("conditions", []):
            if (
                condition["type"] == kind
                and condition["status"] == status
                and (reason is None or condition["reason"] == reason)
            ):
                return body
        return None

    return await wait_for(matches, timeout=timeout, interval=0.25)


async def wait_gone(kube: KubeClient, path: str, timeout: float = 120) -> None:
    """Poll until GET answers 404."""

    async def gone() -> bool:
        try:
            await kube.get(path)
        except NotFoundError:
            return True
        return False

    await wait_for(gone, timeout=timeout, interval=0.25)
