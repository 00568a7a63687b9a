"""The `egress-proxies` command."""

from __future__ import annotations

import argparse
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
    commands.add_parser("crd", help="print the Proxy CRD generated from the models")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    if args.command == "dev-cluster":
        if args.action == "up":
            if args.detach:
                return cluster.run_detached(args.state_dir, args.crds)
            return cluster.run_foreground(args.state_dir, args.crds)
        return cluster.stop(args.state_dir)
    if args.command == "crd":
        sys.stdout.write(crd.render())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
