"""What the composition root builds from the settings and the process environment.

Each function turns options (`RunSettings`) and the few variables that are
not options into one component or value the operator is made of.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from pathlib import Path

from egress_proxies import toolchain
from egress_proxies.clock import Clock
from egress_proxies.errors import EgressProxiesError
from egress_proxies.model import ProviderName
from egress_proxies.operator.shard import shard_from_flags
from egress_proxies.providers.gcp import GceInventory
from egress_proxies.proxies.backoff import RetryPolicy
from egress_proxies.proxies.components import Program
from egress_proxies.proxies.sharding import Shard
from egress_proxies.settings import RunSettings
from egress_proxies.stacks.programs import deferred
from egress_proxies.stacks.runner import RunnerSettings, StackRunner

STACK_WORKER_MODULE = "egress_proxies.operator.stack_worker"
PASSPHRASE_FILE_ENV = "EGRESS_PROXIES_PASSPHRASE_FILE"  # noqa: S105 - a variable name
PASSPHRASE_ENV = "PULUMI_CONFIG_PASSPHRASE"  # noqa: S105 - a variable name
PULUMI_ROOT_ENV = "EGRESS_PROXIES_PULUMI_ROOT"


class ConfigurationError(RuntimeError, EgressProxiesError):
    """The operator cannot start with the settings it was given."""


def stack_passphrase(env: Mapping[str, str]) -> str:
    """The stack passphrase: the file $EGRESS_PROXIES_PASSPHRASE_FILE names, else the variable.

    ConfigurationError when neither is set: without it the stacks' secrets are lost.
    """
    path = env.get(PASSPHRASE_FILE_ENV)
    passphrase = Path(path).read_text().strip() if path else env.get(PASSPHRASE_ENV)
    if not passphrase:
        raise ConfigurationError(
            f"no stack passphrase: set {PASSPHRASE_ENV} or {PASSPHRASE_FILE_ENV} "
            "(keep it: without it the stacks' secrets are lost)"
        )
    return passphrase


def pulumi_root(env: Mapping[str, str]) -> Path | None:
    """The toolchain cache when it has a pulumi CLI, else None (pulumi from PATH)."""
    override = env.get(PULUMI_ROOT_ENV)
    if override:
        return Path(override)
    root = toolchain.cache_dir()
    return root if (root / "bin" / "pulumi").exists() else None


def retry_policy(settings: RunSettings) -> RetryPolicy:
    """The retry backoff and the instance start deadlines the options set."""
    return RetryPolicy(
        base=datetime.timedelta(seconds=settings.retry_base),
        cap=datetime.timedelta(seconds=settings.retry_cap),
        start_timeout=datetime.timedelta(seconds=settings.instance_start_timeout),
        ready_timeout=datetime.timedelta(seconds=settings.instance_ready_timeout),
    )


def shard_of(settings: RunSettings) -> Shard | None:
    """The shard the options describe (None: one operator owns everything); ShardError if bad."""
    return shard_from_flags(settings.shard_name, settings.shard_selector, settings.namespaces)


def stack_runner(
    settings: RunSettings,
    passphrase: str,
    root: Path | None,
    env: Mapping[str, str],
    clock: Clock,
) -> StackRunner:
    """The runner of every pulumi operation, with the providers' PATH and kubeconfig."""
    provider_env = {"PATH": f"{toolchain.bin_dir()}{os.pathsep}{env.get('PATH', '')}"}
    if settings.kubeconfig is not None:
        provider_env["KUBECONFIG"] = str(settings.kubeconfig.resolve())
    return StackRunner(
        RunnerSettings(
            state_dir=settings.state_dir,
            passphrase=passphrase,
            state_backend=settings.state_backend,
            concurrency=settings.concurrency,
            pulumi_root=root,
            extra_env=provider_env,
            worker_idle=settings.stack_worker_idle,
            worker_operations=settings.stack_worker_operations,
            worker_module=STACK_WORKER_MODULE,
        ),
        clock,
    )


def programs() -> dict[ProviderName, Program]:
    """The inline program of each provider (imported by the process that first runs it)."""
    return {
        ProviderName.KUBERNETES: deferred.squid_pod_program,
        ProviderName.GCP: deferred.gce_vm_program,
    }


def gce_inventory(project: str, shard: Shard | None, clock: Clock) -> GceInventory:
    """The GCE inventory of `project`, with Application Default Credentials.

    google-auth (with `requests` and cryptography) and pulumi-gcp are imported
    only by an operator with a GCP project or a GCE Proxy: about 5 MiB of
    resident memory that an operator of Squid pods never uses.
    """
    from egress_proxies.providers.gcp_auth import application_default_tokens  # noqa: PLC0415

    tokens = application_default_tokens(clock)
    return GceInventory(project, tokens, shard=shard.name if shard else None)
