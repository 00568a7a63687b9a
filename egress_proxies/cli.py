"""The `egress-proxies` command."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from egress_proxies import crd
from egress_proxies.devcluster import cluster


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
    crd_command = commands.add_parser("crd", help="print a CRD generated from the models")
    crd_command.add_argument("resource", nargs="?", choices=("proxy", "proxypool"), default="proxy")
    run = commands.add_parser("run", help="run the operator")
    run.add_argument(
        "--kubeconfig",
        type=Path,
        default=_env_path("KUBECONFIG"),
        help="default: $KUBECONFIG, else the in-cluster service account",
    )
    run.add_argument(
        "--state-dir",
        type=Path,
        default=_env_path("EGRESS_PROXIES_STATE_DIR") or Path(".state/operator"),
        help="Pulumi backend and stack work dirs ($EGRESS_PROXIES_STATE_DIR)",
    )
    run.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=_env_list("EGRESS_PROXIES_NAMESPACES"),
        help="watch only this namespace (repeatable); default: all",
    )
    run.add_argument(
        "--concurrency",
        type=int,
        default=int(os.environ.get("EGRESS_PROXIES_CONCURRENCY", "4")),
        help="pulumi operations at once ($EGRESS_PROXIES_CONCURRENCY, default 4)",
    )
    run.add_argument(
        "--liveness-port", type=int, default=None, help="serve kopf's liveness probe on this port"
    )
    run.add_argument(
        "--discovery-port",
        type=int,
        default=int(os.environ.get("EGRESS_PROXIES_DISCOVERY_PORT", "8090")),
        help="the discovery + lease API's port (default 8090)",
    )
    run.add_argument(
        "--discovery-host",
        default=os.environ.get("EGRESS_PROXIES_DISCOVERY_HOST", "0.0.0.0"),
        help="the address the discovery API binds (default 0.0.0.0)",
    )
    run.add_argument(
        "--discovery-tokens-dir",
        type=Path,
        default=_env_path("EGRESS_PROXIES_DISCOVERY_TOKENS_DIR"),
        help="a mounted Secret: one bearer token per file, re-read on change",
    )
    run.add_argument(
        "--discovery-allow-no-auth",
        action="store_true",
        default=os.environ.get("EGRESS_PROXIES_DISCOVERY_ALLOW_NO_AUTH") == "true",
        help="serve the discovery API without authentication (logged loudly)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("EGRESS_PROXIES_METRICS_PORT", "9090")),
        help="serve Prometheus metrics at /metrics on this port (default 9090; 0 = off)",
    )
    run.add_argument(
        "--trace-health-probes",
        action="store_true",
        default=os.environ.get("EGRESS_PROXIES_TRACE_HEALTH_PROBES") == "true",
        help="one span per health probe (only when tracing is enabled by OTEL_* variables)",
    )
    run.add_argument(
        "--lease-max-ttl",
        type=int,
        default=int(os.environ.get("EGRESS_PROXIES_LEASE_MAX_TTL_SECONDS", "3600")),
        help="the longest lease a crawler may ask for, in seconds (default 3600)",
    )
    run.add_argument(
        "--lease-cooldown",
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_LEASE_COOLDOWN_SECONDS", "300")),
        help="a ban's first cooldown, in seconds, and the longest a rate limit cools (default 300)",
    )
    run.add_argument(
        "--lease-rate-limit-cooldown",
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_LEASE_RATE_LIMIT_COOLDOWN_SECONDS", "30")),
        help="a rate limit's first cooldown without the site's Retry-After, doubling on "
        "repeats up to --lease-cooldown (default 30)",
    )
    run.add_argument(
        "--lease-ban-backoff-cap",
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_LEASE_BAN_BACKOFF_CAP_SECONDS", "21600")),
        help="the longest cooldown after repeated bans, in seconds (default 21600 = 6 h)",
    )
    run.add_argument(
        "--lease-store",
        default=os.environ.get("EGRESS_PROXIES_LEASE_STORE", "memory"),
        help="where leases and cooldowns live: memory (default; lost on restart) or a "
        "redis://, rediss:// (TLS) or unix:// URL, with AUTH in it as redis-py reads it",
    )
    run.add_argument(
        "--lease-store-prefix",
        default=os.environ.get("EGRESS_PROXIES_LEASE_STORE_PREFIX", "egress-proxies"),
        help="the Redis key prefix; processes sharing it share leases (default egress-proxies)",
    )
    run.add_argument(
        "--lease-store-timeout",
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_LEASE_STORE_TIMEOUT_SECONDS", "1")),
        help="seconds a Redis call may take before the API answers 503 (default 1)",
    )
    run.add_argument(
        "--gc-interval",
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_GC_INTERVAL_SECONDS", "600")),
        help="seconds between orphan GC sweeps (default 600)",
    )
    run.add_argument(
        "--gc-min-age",
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_GC_MIN_AGE_SECONDS", "600")),
        help="an orphan must be this many seconds old to be deleted (default 600)",
    )
    run.add_argument(
        "--gc-allow-namespaced",
        action="store_true",
        default=os.environ.get("EGRESS_PROXIES_GC_ALLOW_NAMESPACED") == "true",
        help="sweep even when watching only some namespaces",
    )
    for flag, variable, default, meaning in RETRY_FLAGS:
        run.add_argument(
            flag,
            type=float,
            default=float(os.environ.get(variable, str(default))),
            help=f"{meaning} (${variable}, default {default:g})",
        )
    run.add_argument(
        "--gcp-project",
        default=os.environ.get("EGRESS_PROXIES_GCP_PROJECT") or os.environ.get("GOOGLE_PROJECT"),
        help="the GCP project whose VMs the GC sweeps and the GCE watch polls "
        "($EGRESS_PROXIES_GCP_PROJECT, else $GOOGLE_PROJECT; unset: no GCE inventory)",
    )
    run.add_argument(
        "--gce-watch-interval",
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_GCE_WATCH_INTERVAL_SECONDS", "30")),
        help="seconds between polls of the GCE VMs of live Proxies (default 30)",
    )
    run.add_argument(
        "--peering",
        default=os.environ.get("EGRESS_PROXIES_PEERING", "egress-proxies"),
        help="the kopf peering object shared with other operators "
        "($EGRESS_PROXIES_PEERING, default egress-proxies; created when missing)",
    )
    run.add_argument(
        "--priority",
        type=int,
        default=int(os.environ.get("EGRESS_PROXIES_PEERING_PRIORITY", "0")),
        help="peering priority: a live peer with a higher one pauses this operator, "
        "the same one pauses both ($EGRESS_PROXIES_PEERING_PRIORITY, default 0)",
    )
    run.add_argument(
        "--shard-selector",
        default=os.environ.get("EGRESS_PROXIES_SHARD_SELECTOR"),
        help="own only the Proxies this label selector picks, e.g. shard=a "
        '($EGRESS_PROXIES_SHARD_SELECTOR; see docs/operations.md "Sharding")',
    )
    run.add_argument(
        "--shard-name",
        default=os.environ.get("EGRESS_PROXIES_SHARD_NAME"),
        help="this shard's name in labels, finalizer and peering object "
        "($EGRESS_PROXIES_SHARD_NAME; default: derived from --shard-selector)",
    )
    run.add_argument(
        "--standalone",
        action="store_true",
        default=os.environ.get("EGRESS_PROXIES_STANDALONE") == "true",
        help="no peering: for a cluster without the kopf.dev peering CRDs, where one "
        "operator is guaranteed to run alone",
    )
    _add_discovery_tier(commands)
    return parser


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
        type=float,
        default=float(os.environ.get("EGRESS_PROXIES_LEASE_STORE_TIMEOUT_SECONDS", "1")),
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
        type=int,
        default=int(os.environ.get("EGRESS_PROXIES_DISCOVERY_PORT", "8090")),
        help="the API's port (default 8090)",
    )
    tier.add_argument(
        "--host",
        default=os.environ.get("EGRESS_PROXIES_DISCOVERY_HOST", "0.0.0.0"),
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
        default=os.environ.get("EGRESS_PROXIES_DISCOVERY_ALLOW_NO_AUTH") == "true",
        help="serve without authentication (logged loudly)",
    )
    tier.add_argument(
        "--lease-max-ttl",
        type=int,
        default=int(os.environ.get("EGRESS_PROXIES_LEASE_MAX_TTL_SECONDS", "3600")),
        help="the longest lease a crawler may ask for, in seconds (default 3600; "
        "the same on every replica and the operator)",
    )


# (flag, variable, default seconds, meaning): the RetryPolicy, docs/operator.md "Retries".
RETRY_FLAGS = (
    ("--retry-base", "EGRESS_PROXIES_RETRY_BASE_SECONDS", 5.0, "seconds before the first retry"),
    ("--retry-cap", "EGRESS_PROXIES_RETRY_CAP_SECONDS", 300.0, "longest retry backoff, seconds"),
    (
        "--instance-start-timeout",
        "EGRESS_PROXIES_INSTANCE_START_TIMEOUT_SECONDS",
        60.0,
        "seconds an instance may stay stuck (image pull, crash loop) before it is replaced",
    ),
    (
        "--instance-ready-timeout",
        "EGRESS_PROXIES_INSTANCE_READY_TIMEOUT_SECONDS",
        300.0,
        "seconds an instance may take to become ready before it is replaced",
    ),
)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _env_list(name: str) -> list[str]:
    return [item for item in os.environ.get(name, "").split(",") if item]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    if args.command == "dev-cluster":
        if args.action == "up":
            if args.detach:
                return cluster.run_detached(args.state_dir, args.crds)
            return cluster.run_foreground(args.state_dir, args.crds)
        return cluster.stop(args.state_dir)
    if args.command == "run":
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
            shard = shard_from_flags(args.shard_name, args.shard_selector, args.namespaces)
        except ShardError as error:
            print(f"egress-proxies: {error}", file=sys.stderr)
            return 2

        return run_operator(
            OperatorSettings(
                state_dir=args.state_dir,
                kubeconfig=args.kubeconfig,
                namespaces=tuple(args.namespaces),
                concurrency=args.concurrency,
                passphrase=passphrase_from_env(),
                pulumi_root=default_pulumi_root(),
                liveness_port=args.liveness_port,
                gc_interval=datetime.timedelta(seconds=args.gc_interval),
                gc_min_age=datetime.timedelta(seconds=args.gc_min_age),
                gc_allow_namespaced=args.gc_allow_namespaced,
                retry=RetryPolicy(
                    base=datetime.timedelta(seconds=args.retry_base),
                    cap=datetime.timedelta(seconds=args.retry_cap),
                    start_timeout=datetime.timedelta(seconds=args.instance_start_timeout),
                    ready_timeout=datetime.timedelta(seconds=args.instance_ready_timeout),
                ),
                peering=None if args.standalone else args.peering,
                priority=args.priority,
                discovery_host=args.discovery_host,
                discovery_port=args.discovery_port,
                discovery_tokens_dir=args.discovery_tokens_dir,
                discovery_allow_no_auth=args.discovery_allow_no_auth,
                metrics_port=args.metrics_port or None,
                trace_health_probes=args.trace_health_probes,
                gcp_project=args.gcp_project or None,
                gce_watch_interval=datetime.timedelta(seconds=args.gce_watch_interval),
                lease_max_ttl=args.lease_max_ttl,
                lease_cooldown_window=args.lease_cooldown,
                lease_ban_backoff_cap=args.lease_ban_backoff_cap,
                lease_rate_limit_window=args.lease_rate_limit_cooldown,
                shard=shard,
                lease_store=args.lease_store,
                lease_store_prefix=args.lease_store_prefix,
                lease_store_timeout=args.lease_store_timeout,
            )
        )
    if args.command == "discovery":
        from egress_proxies.leases import LeaseLimits  # noqa: PLC0415
        from egress_proxies.tier.app import TierSettings, run_tier  # noqa: PLC0415

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
                limits=LeaseLimits(max_ttl=args.lease_max_ttl),
            )
        )
    if args.command == "crd":
        sys.stdout.write(crd.render_pool() if args.resource == "proxypool" else crd.render())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
