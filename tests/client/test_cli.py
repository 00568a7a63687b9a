"""The CLI as a shell script sees it: a subprocess against the real discovery app."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.served import Served, serve_in_thread
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client

CLI = [sys.executable, "-m", "egress_proxies_client"]
PROXY_URL = "http://user-only:p%40ss%3Aw%2Frd@127.0.0.1:3128"
# Runs the rest of the command line with SIGINT at its default, as a terminal's
# foreground command has it. Started from a background job (`make test &`) the
# suite inherits SIGINT ignored, an ignored signal stays ignored across exec, and
# the command `run` forwards SIGINT to would ignore it too.
SIGINT_DEFAULT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]


@pytest.fixture
def served() -> Iterator[Served]:
    with serve_in_thread(record("only", attributes={"region": "eu"})) as served:
        yield served


def env_for(served: Served) -> dict[str, str]:
    return os.environ | {
        "EGRESS_PROXIES_API_URL": served.url,
        "EGRESS_PROXIES_TOKEN": served.tokens.one,
    }


def cli(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env_for(served), capture_output=True, text=True, timeout=60, check=False
    )


def test_run_exits_with_cmd_s_status_and_releases_when_it_fails(
    served: Served, tmp_path: Path
) -> None:
    seen = tmp_path / "proxy"
    script = f'printf %s "$HTTPS_PROXY" > {seen}; exit 7'
    done = cli(served, "run", "-s", "region=eu", "-t", "t.example", "--", "sh", "-c", script)
    assert done.returncode == 7, done.stderr
    assert seen.read_text() == PROXY_URL
    assert served.store.last_counts().leases == 0
    assert served.lease_requests("granted") == 1
    assert served.reports("ok", "") == 0, "only exit 0 reports ok by default"


def test_run_hands_cmd_the_lease_s_pace(served: Served, tmp_path: Path) -> None:
    seen = tmp_path / "pace"
    script = f'printf "%s %s" "$EGRESS_PROXIES_PACE_RPS" "$EGRESS_PROXIES_PACE_BURST" > {seen}'
    done = cli(served, "run", "-t", "t.example", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert seen.read_text() == "0.5 1", "the server's default start pace"


def test_run_reports_by_exit_status_with_a_configurable_mapping(served: Served) -> None:
    assert cli(served, "run", "-t", "t.example", "--", "true").returncode == 0
    assert served.reports("ok", "") == 1
    mapped = ["--report", "22=banned:http_403"]
    done = cli(served, "run", "-t", "t.example", *mapped, "--", "sh", "-c", "exit 22")
    assert done.returncode == 22
    assert served.reports("banned", "http_403") == 1
    assert served.store.last_counts().leases == 0
    refused = cli(served, "run", "-t", "t.example", "--wait", "0", "--", "true")
    assert refused.returncode == 3, "the banned pair cools: no proxy"
    assert "no proxy free" in refused.stderr


def test_run_releases_on_sigint_and_exits_like_the_interrupted_command(served: Served) -> None:
    child = subprocess.Popen(
        [*SIGINT_DEFAULT, *CLI, "run", "-t", "t.example", "--", "sleep", "30"],
        env=env_for(served),
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    children = Path(f"/proc/{child.pid}/task/{child.pid}/children")
    # Leased, and the command started: its handlers go in right after the command starts.
    while served.store.last_counts().leases == 0 or not children.read_text().split():
        assert time.monotonic() < deadline, "never leased and started the command"
        time.sleep(0.05)
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=20) == 128 + signal.SIGINT
    assert served.store.last_counts().leases == 0
    assert served.reports("ok", "") == 0


def test_list_lease_renew_report_release(served: Served) -> None:
    table = cli(served, "proxies")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].split() == [
        "crawl/only",
        "http://127.0.0.1:3128",
        "yes",
        "0",
        "(1/target)",
        "10",
        "ms",
        "region=eu",
    ]
    listed = json.loads(cli(served, "proxies", "--json", "-s", "region=eu").stdout)
    assert [p["name"] for p in listed] == ["only"]
    assert json.loads(cli(served, "proxies", "--json", "-s", "region=us").stdout) == []
    lease = json.loads(cli(served, "lease", "-t", "t.example", "--ttl", "30").stdout)
    assert (lease["proxy"], lease["proxyUrl"]) == ("crawl/only", PROXY_URL)
    renewal = cli(served, "renew", lease["leaseId"], "--ttl", "90")
    assert renewal.returncode == 0, renewal.stderr  # CI at load once printed nothing here
    assert json.loads(renewal.stdout)["ttlSeconds"] == 90
    assert cli(served, "report", lease["leaseId"], "banned", "--reason", "captcha").returncode == 0
    assert served.reports("banned", "captcha") == 1
    assert cli(served, "release", lease["leaseId"]).returncode == 0
    assert served.store.last_counts().leases == 0
    ended = cli(served, "renew", lease["leaseId"])
    assert (ended.returncode, "unknown_lease" in ended.stderr) == (4, True)


def test_the_token_never_appears_in_output(served: Served) -> None:
    wrong = os.environ | {"EGRESS_PROXIES_API_URL": served.url, "EGRESS_PROXIES_TOKEN": "x" * 30}
    done = subprocess.run([*CLI, "proxies"], env=wrong, capture_output=True, text=True, check=False)
    assert done.returncode == 4
    assert "401 unauthorized" in done.stderr
    assert "x" * 30 not in done.stderr + done.stdout
