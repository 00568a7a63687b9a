"""The `egress-proxies` command."""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings

from egress_proxies import crd
from egress_proxies.operator.settings import (
    LeaseLimitSettings,
    RunSettings,
    flag_of,
    variables_of,
)

T = TypeVar("T")
Settings = TypeVar("Settings", bound=BaseSettings)


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar."""
    parser = argparse.ArgumentParser(
        prog="egress-proxies", description="A Kubernetes operator for crawler egress proxies."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dev = commands.add_parser("dev-cluster", help="a local control plane with one node")
    dev_commands = dev.add_subparsers(dest="action", required=True)
    up = dev_commands.add_parser("up", help="start the dev cluster (foreground unless --detach)")
    up.add_argument("--state-dir", type=Path, required=True, help="where keys, data and logs live")
    up.add_argument("--detach", action="store_true", help="return once ready; keep it running")
    up.add_argument(
        "--crds",
        type=Path,
        help="a directory of CRD YAML files to install (default: the project's crds/)",
    )
    down = dev_commands.add_parser("down", help="stop a dev cluster and everything it started")
    down.add_argument("--state-dir", type=Path, required=True)
    crd_command = commands.add_parser("crd", help="print a CRD generated from the models")
    crd_command.add_argument("resource", nargs="?", choices=("proxy", "proxypool"), default="proxy")
    run = commands.add_parser("run", help="run the operator")
    add_settings_arguments(run)
    _add_discovery_tier(commands)
    return parser


def _env_path(variable: str) -> Path | None:
    value = os.environ.get(variable)
    return Path(value) if value else None


def _port(text: str) -> int:
    """A TCP port, as a flag or variable gives it."""
    port = int(text) if text.strip().isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}")
    return port


def _positive_seconds(text: str) -> float:
    """A duration in seconds, more than zero."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def _true_or_false(text: str) -> bool:
    """A switch's variable: true, false, or empty for false."""
    if text not in ("true", "false", ""):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text == "true"


def _env(variable: str, default: str, parse: Callable[[str], T]) -> T:
    """The variable read as its flag reads its value; a malformed one exits 2 naming it.

    Checked while the grammar is built, so any command reports it, before reading anything else.
    """
    try:
        return parse(os.environ.get(variable, default))
    except argparse.ArgumentTypeError as error:
        print(f"egress-proxies: error: ${variable}: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _add_discovery_tier(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tier = commands.add_parser(
        "discovery", help="serve the discovery + lease API alone (any number of replicas)"
    )
    tier.add_argument(
        "--lease-store",
        default=os.environ.get("EGRESS_PROXIES_LEASE_STORE"),
        required="EGRESS_PROXIES_LEASE_STORE" not in os.environ,
        help="the shared lease store, redis://[user:password@]host:port/db or rediss://... "
        "($EGRESS_PROXIES_LEASE_STORE)",
    )
    tier.add_argument(
        "--lease-store-prefix",
        default=os.environ.get("EGRESS_PROXIES_LEASE_STORE_PREFIX", "egress-proxies"),
        help="the Redis key prefix, the same as the operator's (default egress-proxies)",
    )
    tier.add_argument(
        "--lease-store-timeout",
        type=_positive_seconds,
        default=_env("EGRESS_PROXIES_LEASE_STORE_TIMEOUT_SECONDS", "1", _positive_seconds),
        help="seconds a Redis call may take before the API answers 503 (default 1)",
    )
    tier.add_argument(
        "--kubeconfig",
        type=Path,
        default=_env_path("KUBECONFIG"),
        help="default: $KUBECONFIG, else the in-cluster service account",
    )
    tier.add_argument(
        "--port",
        type=_port,
        default=_env("EGRESS_PROXIES_DISCOVERY_PORT", "8090", _port),
        help="the API's port (default 8090)",
    )
    tier.add_argument(
        "--host",
        default=os.environ.get("EGRESS_PROXIES_DISCOVERY_HOST", "0.0.0.0"),  # noqa: S104
        help="the address the API binds (default 0.0.0.0)",
    )
    tier.add_argument(
        "--tokens-dir",
        type=Path,
        default=_env_path("EGRESS_PROXIES_DISCOVERY_TOKENS_DIR"),
        help="a mounted Secret: one bearer token per file, re-read on change",
    )
    tier.add_argument(
        "--allow-no-auth",
        action="store_true",
        default=_env("EGRESS_PROXIES_DISCOVERY_ALLOW_NO_AUTH", "false", _true_or_false),
        help="serve without authentication (logged loudly)",
    )
    # The operator's lease limits, from the same declaration: one store, one set of cooldowns.
    add_settings_arguments(tier, LeaseLimitSettings)


def add_settings_arguments(
    parser: argparse.ArgumentParser, model: type[BaseSettings] = RunSettings
) -> None:
    """One flag per field of `model`; a flag left out stays out, so the variable applies."""
    for name, info in model.model_fields.items():
        variables = " or ".join(f"${variable}" for variable in variables_of(name, info))
        shown = "unset" if info.default in (None, []) else info.default
        text = f"{info.description} ({variables}; default: {shown})".replace("%", "%%")
        common: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": text}
        if info.annotation is bool:
            parser.add_argument(flag_of(name, info), action="store_const", const=True, **common)
        elif name == "namespaces":
            parser.add_argument(flag_of(name, info), action="append", **common)
        else:
            parser.add_argument(flag_of(name, info), **common)


def read_settings(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> RunSettings:
    """`run`'s settings: `flags` over the environment over the defaults."""
    return read_options(parser, flags, RunSettings)


def read_options(
    parser: argparse.ArgumentParser, flags: argparse.Namespace, model: type[Settings]
) -> Settings:
    """`model` from `flags` over the environment over the defaults; a bad value exits naming it."""
    given = {name: value for name, value in vars(flags).items() if name in model.model_fields}
    try:
        return model(**given)
    except ValidationError as error:
        problems = [_describe(model, problem) for problem in error.errors()]
        parser.error("; ".join(problems))


def _describe(model: type[BaseSettings], problem: ErrorDetails) -> str:
    """One validation problem, naming the flag and the variables it could have come from."""
    where = str(problem["loc"][0]) if problem["loc"] else ""
    for name, info in model.model_fields.items():
        variables = variables_of(name, info)
        if where in (name, *variables):
            where = f"{flag_of(name, info)} / " + " or ".join(f"${v}" for v in variables)
            break
    return f"{where}: {problem['msg']} (got {problem.get('input')!r})"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "dev-cluster":
        # Imported here: the dev cluster's PKI (cryptography) has no place in the operator's memory.
        from egress_proxies.devcluster import cluster  # noqa: PLC0415

        if args.action == "up":
            crds = args.crds or cluster.DEFAULT_CRD_DIR
            if args.detach:
                return cluster.run_detached(args.state_dir, crds)
            return cluster.run_foreground(args.state_dir, crds)
        return cluster.stop(args.state_dir)
    if args.command == "run":
        settings = read_settings(parser, args)
        # pulumi reads TRACEPARENT when imported and installs its own tracer
        # provider: OTEL_* would be ignored and every span would join that trace.
        os.environ.pop("TRACEPARENT", None)
        os.environ.pop("TRACESTATE", None)
        # Imported here: kopf and pulumi take a second to import, dev-cluster needs neither.
        from egress_proxies.operator.app import (  # noqa: PLC0415
            OperatorSettings,
            default_pulumi_root,
            passphrase_from_env,
            run_operator,
        )
        from egress_proxies.operator.backoff import RetryPolicy  # noqa: PLC0415
        from egress_proxies.operator.shard import ShardError, shard_from_flags  # noqa: PLC0415

        try:
            shard = shard_from_flags(
                settings.shard_name, settings.shard_selector, settings.namespaces
            )
        except ShardError as error:
            print(f"egress-proxies: {error}", file=sys.stderr)
            return 2
        try:
            lease_pace = settings.pace_limits()
        except ValueError as error:
            parser.error(f"--lease-pace-* / --lease-target-bounds: {error}")

        return run_operator(
            OperatorSettings(
                state_dir=settings.state_dir,
                kubeconfig=settings.kubeconfig,
                namespaces=tuple(settings.namespaces),
                concurrency=settings.concurrency,
                squid_image=settings.squid_image,
                stack_worker_idle=settings.stack_worker_idle,
                stack_worker_operations=settings.stack_worker_operations,
                passphrase=passphrase_from_env(),
                pulumi_root=default_pulumi_root(),
                liveness_port=settings.liveness_port,
                gc_interval=datetime.timedelta(seconds=settings.gc_interval),
                gc_min_age=datetime.timedelta(seconds=settings.gc_min_age),
                gc_allow_namespaced=settings.gc_allow_namespaced,
                retry=RetryPolicy(
                    base=datetime.timedelta(seconds=settings.retry_base),
                    cap=datetime.timedelta(seconds=settings.retry_cap),
                    start_timeout=datetime.timedelta(seconds=settings.instance_start_timeout),
                    ready_timeout=datetime.timedelta(seconds=settings.instance_ready_timeout),
                ),
                peering=None if settings.standalone else settings.peering,
                priority=settings.priority,
                discovery_host=settings.discovery_host,
                discovery_port=settings.discovery_port,
                discovery_tokens_dir=settings.discovery_tokens_dir,
                discovery_allow_no_auth=settings.discovery_allow_no_auth,
                metrics_port=settings.metrics_port or None,
                trace_health_probes=settings.trace_health_probes,
                gcp_project=settings.gcp_project,
                gce_watch_interval=datetime.timedelta(seconds=settings.gce_watch_interval),
                lease_max_ttl=settings.lease_max_ttl,
                lease_cooldown_window=settings.lease_cooldown,
                lease_ban_backoff_cap=settings.lease_ban_backoff_cap,
                lease_rate_limit_window=settings.lease_rate_limit_cooldown,
                lease_pace=lease_pace,
                shard=shard,
                lease_store=settings.lease_store,
                lease_store_prefix=settings.lease_store_prefix,
                lease_store_timeout=settings.lease_store_timeout,
            )
        )
    if args.command == "discovery":
        from egress_proxies.tier.app import TierSettings, run_tier  # noqa: PLC0415

        try:
            limits = read_options(parser, args, LeaseLimitSettings).lease_limits()
        except ValueError as error:
            flags = ", ".join(flag_of(n, i) for n, i in LeaseLimitSettings.model_fields.items())
            parser.error(f"lease limits ({flags}): {error}")

        return run_tier(
            TierSettings(
                lease_store=args.lease_store,
                lease_store_prefix=args.lease_store_prefix,
                lease_store_timeout=args.lease_store_timeout,
                kubeconfig=args.kubeconfig,
                host=args.host,
                port=args.port,
                tokens_dir=args.tokens_dir,
                allow_no_auth=args.allow_no_auth,
                limits=limits,
            )
        )
    if args.command == "crd":
        sys.stdout.write(crd.render_pool() if args.resource == "proxypool" else crd.render())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
