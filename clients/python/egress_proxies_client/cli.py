"""egress-proxies-client: list, lease, renew, release, report, and run a command through a proxy.

The API and token come from EGRESS_PROXIES_API_URL and EGRESS_PROXIES_TOKEN (or a file
named by EGRESS_PROXIES_TOKEN_FILE / --token-file): never from an argument, which any
user on the machine could read in the process list.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from types import FrameType

from egress_proxies_client.errors import EgressProxiesError, NoProxyAvailableError
from egress_proxies_client.policy import Verdict
from egress_proxies_client.pool import DEFAULT_TTL, DEFAULT_WAIT, Lease, Pool
from egress_proxies_client.wire import Grant, ProxyInfo

EXIT_NO_PROXY = 3
EXIT_API = 4
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
# The lease's pace when CMD starts: requests/s and burst, for CMD to keep to.
PACE_RATE_VARIABLE = "EGRESS_PROXIES_PACE_RPS"
PACE_BURST_VARIABLE = "EGRESS_PROXIES_PACE_BURST"
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status is the command's (for `run`, CMD's)."""
    args = _parser().parse_args(argv)
    try:
        pool = Pool(args.api_url or _required("EGRESS_PROXIES_API_URL"), _token(args.token_file))
    except EgressProxiesError as error:
        print(f"egress-proxies-client: {error}", file=sys.stderr)
        return EXIT_API
    try:
        with pool:
            return int(args.handler(pool, args))
    except NoProxyAvailableError as error:
        print(f"egress-proxies-client: {error}", file=sys.stderr)
        return EXIT_NO_PROXY
    except EgressProxiesError as error:
        print(f"egress-proxies-client: {error}", file=sys.stderr)
        return EXIT_API


def _proxies(pool: Pool, args: argparse.Namespace) -> int:
    proxies = pool.proxies(args.selector, args.healthy)
    if args.json:
        print(json.dumps([asdict(proxy) for proxy in proxies], indent=2))
        return 0
    rows: list[tuple[str, ...]] = [("PROXY", "URL", "HEALTHY", "LEASES", "LATENCY", "ATTRIBUTES")]
    rows += [_row(proxy) for proxy in proxies]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def _row(proxy: ProxyInfo) -> tuple[str, ...]:
    healthy = {True: "yes", False: "no", None: "unknown"}[proxy.healthy]
    latency = "-" if proxy.latency_millis is None else f"{proxy.latency_millis} ms"
    attributes = ",".join(f"{k}={v}" for k, v in sorted(proxy.attributes.items()))
    # Capacity is per target: a proxy carries max_leases for each site at once.
    leases = f"{proxy.active_leases} ({proxy.max_leases}/target)"
    return (proxy.key, proxy.url, healthy, leases, latency, attributes or "-")


def _lease(pool: Pool, args: argparse.Namespace) -> int:
    lease = pool.acquire(args.selector, args.target, args.ttl, args.wait)
    _print_grant(lease.grant)
    return 0


def _renew(pool: Pool, args: argparse.Namespace) -> int:
    _print_grant(pool.renew(args.lease_id, args.ttl))
    return 0


def _print_grant(grant: Grant) -> None:
    # stdout is what the user asked for, so the URL with credentials goes there (never a log).
    print(
        json.dumps(
            {
                "leaseId": grant.lease_id,
                "proxy": grant.proxy_key,
                "proxyUrl": grant.proxy_url_with_credentials,
                "target": grant.target,
                "ttlSeconds": grant.ttl_seconds,
                "expiresAt": grant.expires_at.isoformat(),
            }
        )
    )


def _release(pool: Pool, args: argparse.Namespace) -> int:
    pool.release(args.lease_id)
    return 0


def _report(pool: Pool, args: argparse.Namespace) -> int:
    pool.report(args.lease_id, args.result, args.reason, args.target, args.retry_after)
    return 0


def _run(pool: Pool, args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("egress-proxies-client run: no command after --", file=sys.stderr)
        return 2
    lease = pool.acquire(args.selector, args.target, args.ttl, args.wait)
    try:
        status = _run_child(lease, command, args.ttl)
        outcome = args.report.get(status)
        if outcome is not None:
            verdict, reason = outcome
            lease.report(verdict, reason)
        return status
    finally:
        lease.release()


def _run_child(lease: Lease, command: list[str], ttl: int) -> int:
    env = os.environ | dict.fromkeys(PROXY_VARIABLES, lease.proxy_url)
    if lease.pace is not None:
        env[PACE_RATE_VARIABLE] = f"{lease.pace.requests_per_second:g}"
        env[PACE_BURST_VARIABLE] = str(lease.pace.burst)
    child = subprocess.Popen(command, env=env)

    def forward(signum: int, _: FrameType | None) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    stop = threading.Event()
    renewer = threading.Thread(target=_keep_renewing, args=(lease, ttl, stop), daemon=True)
    renewer.start()
    try:
        returncode = child.wait()
    finally:
        stop.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        renewer.join(timeout=5)
    # A child killed by a signal exits like a shell reports it: 128 + the signal.
    return returncode if returncode >= 0 else 128 - returncode


def _keep_renewing(lease: Lease, ttl: int, stop: threading.Event) -> None:
    """Renew at half the TTL while the command runs, so a long command keeps its proxy."""
    while not stop.wait(ttl / 2):
        try:
            lease.renew(ttl)
        except EgressProxiesError as error:
            print(f"egress-proxies-client: renewing failed: {error}", file=sys.stderr)


def _selector(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def _exit_mapping(text: str) -> tuple[int, tuple[Verdict, str | None]]:
    """CODE=RESULT[:REASON], e.g. 0=ok, 22=banned:http_403, 75=rate_limited."""
    code, _, rest = text.partition("=")
    result, _, reason = rest.partition(":")
    try:
        return int(code), (Verdict(result), reason or None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CODE=RESULT[:REASON], got {text!r}") from None


class _Pairs(argparse.Action):
    """Collects repeated pair options into a dict."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        current = dict(getattr(namespace, self.dest) or {})
        assert isinstance(values, tuple)
        current[values[0]] = values[1]
        setattr(namespace, self.dest, current)


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise EgressProxiesError(f"set {name}")
    return value


def _token(token_file: str | None) -> str:
    path = token_file or os.environ.get("EGRESS_PROXIES_TOKEN_FILE")
    if path:
        return Path(path).read_text().strip()
    return _required("EGRESS_PROXIES_TOKEN")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egress-proxies-client", description=__doc__)
    parser.add_argument("--api-url", help="default: $EGRESS_PROXIES_API_URL")
    parser.add_argument("--token-file", help="default: $EGRESS_PROXIES_TOKEN_FILE, else $..._TOKEN")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def with_selection(command: argparse.ArgumentParser, leasing: bool) -> None:
        command.add_argument(
            "--selector", "-s", type=_selector, action=_Pairs, default={}, metavar="KEY=VALUE"
        )
        if leasing:
            command.add_argument("--target", "-t", help="the site, e.g. example.com")
            command.add_argument("--ttl", type=int, default=DEFAULT_TTL, help="seconds")
            command.add_argument("--wait", type=float, default=DEFAULT_WAIT, help="seconds")

    listing = commands.add_parser("proxies", help="list proxies (a table, or --json)")
    with_selection(listing, leasing=False)
    listing.add_argument("--json", action="store_true")
    health = listing.add_mutually_exclusive_group()
    health.add_argument("--healthy", dest="healthy", action="store_const", const=True)
    health.add_argument("--unhealthy", dest="healthy", action="store_const", const=False)
    listing.set_defaults(handler=_proxies)

    lease = commands.add_parser("lease", help="lease a proxy; prints the lease as JSON")
    with_selection(lease, leasing=True)
    lease.set_defaults(handler=_lease)

    renew = commands.add_parser("renew", help="extend a lease")
    renew.add_argument("lease_id")
    renew.add_argument("--ttl", type=int, default=DEFAULT_TTL)
    renew.set_defaults(handler=_renew)

    release = commands.add_parser("release", help="end a lease")
    release.add_argument("lease_id")
    release.set_defaults(handler=_release)

    report = commands.add_parser("report", help="report how a proxy fared")
    report.add_argument("lease_id")
    report.add_argument("result", choices=[v.value for v in Verdict])
    report.add_argument("--reason")
    report.add_argument("--target")
    report.add_argument("--retry-after", type=float)
    report.set_defaults(handler=_report)

    run = commands.add_parser(
        "run",
        help="lease, run CMD with HTTP(S)_PROXY and the pace (EGRESS_PROXIES_PACE_RPS, "
        "EGRESS_PROXIES_PACE_BURST) set, report by exit status, always release",
        usage="%(prog)s [--selector K=V] [--target HOST] [--report CODE=RESULT[:REASON]] -- CMD",
    )
    with_selection(run, leasing=True)
    run.add_argument(
        "--report",
        type=_exit_mapping,
        action=_Pairs,
        default={0: (Verdict.OK, None)},
        metavar="CODE=RESULT[:REASON]",
        help="report RESULT when CMD exits with CODE (default 0=ok; others report nothing)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER)
    run.set_defaults(handler=_run)
    return parser


if __name__ == "__main__":
    sys.exit(main())
