"""The `egress-proxies` command."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from egress_proxies import crd
from egress_proxies.devcluster import cluster
from egress_proxies.operator.settings import RunSettings, flag_of, variables_of


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar."""
    parser = argparse.ArgumentParser(
        prog="egress-proxies", description="A Kubernetes operator for crawler egress proxies."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dev = commands.add_parser("dev-cluster", help="a local control plane with a loopback kubelet")
    dev_commands = dev.add_subparsers(dest="action", required=True)
    up = dev_commands.add_parser("up", help="start the dev cluster (foreground unless --detach)")
    up.add_argument("--state-dir", type=Path, required=True, help="where keys, data and logs live")
    up.add_argument("--detach", action="store_true", help="return once ready; keep it running")
    up.add_argument(
        "--crds",
        type=Path,
        default=cluster.DEFAULT_CRD_DIR,
        help="a directory of CRD YAML files to install (default: the project's crds/)",
    )
    down = dev_commands.add_parser("down", help="stop a dev cluster and everything it started")
    down.add_argument("--state-dir", type=Path, required=True)
    commands.add_parser("crd", help="print the Proxy CRD generated from the models")
    run = commands.add_parser("run", help="run the operator")
    add_settings_arguments(run)
    return parser


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field of `RunSettings`; a flag left out stays out, so the variable applies."""
    for name, info in RunSettings.model_fields.items():
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
    """`flags` over the environment over the defaults; a bad value exits naming its flag."""
    given = {name: value for name, value in vars(flags).items() if name in RunSettings.model_fields}
    try:
        return RunSettings(**given)
    except ValidationError as error:
        problems = [_describe(problem) for problem in error.errors()]
        parser.error("; ".join(problems))


def _describe(problem: ErrorDetails) -> str:
    """One validation problem, naming the flag and the variables it could have come from."""
    where = str(problem["loc"][0]) if problem["loc"] else ""
    for name, info in RunSettings.model_fields.items():
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
        if args.action == "up":
            if args.detach:
                return cluster.run_detached(args.state_dir, args.crds)
            return cluster.run_foreground(args.state_dir, args.crds)
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

        return run_operator(
            OperatorSettings(
                state_dir=settings.state_dir,
                kubeconfig=settings.kubeconfig,
                namespaces=tuple(settings.namespaces),
                concurrency=settings.concurrency,
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
            )
        )
    if args.command == "crd":
        sys.stdout.write(crd.render())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
