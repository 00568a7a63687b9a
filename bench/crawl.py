"""Crawl at the site's pace: a real Scrapy crawl, an SDK crawler and two Scrapy crawls at once.

    python -m bench.crawl [--proxies 4] [--rate 5] [--pages 2500] [--cluster STATE_DIR] [--smoke]

Starts a dev cluster (or uses the running one `--cluster` names; each squid pod
leaves from its own address), the operator and N managed proxies, and a site
that allows R pages/s per source address (429 with `Retry-After: 1` above it, a
ban after 20 429s within 10 s). Each crawler crawls a fresh copy of it, on the
same host: the fleet keeps the pace it learned there in the crawls before. The
two Scrapy processes of (c) may each spread over the whole (exclusive) fleet
(EGRESS_PROXIES_LEASES_PER_DOMAIN = N): they share it as the server tells them
that the other waits. `--halve-after` seconds into each
crawl the site halves R for `--halve-for` seconds, then
restores it. Printed per crawler: efficiency = pages/s / (R x N) before the
halving, the share of answers that were 429, bans, the seconds until 429s
stopped after the halving, the seconds until efficiency was back above 0.8
after the restore (10 s windows), and the most pages one address got within
one second; and per Scrapy process, its finish reason, the pages it fetched, the
leases it took and those it gave back to the other crawler. Several minutes;
figures in docs/performance.md. `--smoke`: 2 proxies,
a 30-page site, 3 s at R / 2: under two minutes, for the test suite. Several sites
crawled at once: bench.broad_crawl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from egress_proxies_client import AsyncLease, AsyncPool, NoProxyAvailableError, ProxyBannedError

from egress_proxies.devcluster import KubeClient
from harness.benchkit.cluster import (
    add_cluster_arguments,
    create_namespace,
    delete_namespace,
    dev_cluster,
)
from harness.benchkit.operators import Descendants, Progress, running, wait_operator_up
from harness.crawl_site import SPIDER, Site, serve_site
from harness.operator import managed_proxy, proxy_path, wait_for_condition
from harness.origins import serve_origin

# The figures each crawler's line promises (tests/*/test_bench_smoke.py).
FIGURES = (
    "efficiency",
    "429 share",
    "bans",
    "429s stopped",
    "back above 0.8",
    "most requests from one address in 1 s",
)
BAN_AFTER, BAN_WINDOW = 20, 10.0
SDK_WORKERS = 8
SCRAPY_CONCURRENCY = "16"
WINDOW = 10.0
LINK = re.compile(r'href="/page/(\d+)"')

Crawler = Callable[[Site, str], Awaitable[None]]


async def scrapy_crawl(site: Site, api: tuple[str, str], out: Path, leases: int) -> None:
    """One `scrapy runspider` of the crawl spider spreading a domain over up to `leases`
    leases, to its end."""
    out.mkdir(parents=True, exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "scrapy", "runspider", str(SPIDER)),
        *("-a", f"start_url={site.url}"),
        env=os.environ
        | {
            "EGRESS_PROXIES_API_URL": api[0],
            "EGRESS_PROXIES_TOKEN": api[1],
            "CRAWL_OUT": str(out),
            "CRAWL_CONCURRENCY": SCRAPY_CONCURRENCY,
            "CRAWL_LEASES_PER_DOMAIN": str(leases),
        },
        cwd=out,
        stdout=(out / "scrapy.log").open("w"),
        stderr=asyncio.subprocess.STDOUT,
    )
    if await process.wait() != 0:
        raise RuntimeError(f"scrapy failed; see {out / 'scrapy.log'}")


class SdkCrawler:
    """SDK_WORKERS tasks over one lease per proxy, each request at its lease's turn."""

    def __init__(self, site: Site, leases: list[AsyncLease]) -> None:
        self.site = site
        self.base = site.url.rsplit("/page/", 1)[0]
        self.leases = leases
        self.clients = {
            lease.lease_id: httpx.AsyncClient(proxy=lease.proxy_url, trust_env=False)
            for lease in leases
        }
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        self.queue.put_nowait(0)
        self.done: set[int] = set()

    async def run(self) -> None:
        """Crawl every page, then close the clients and release the leases."""
        try:
            await asyncio.gather(*(self._work() for _ in range(SDK_WORKERS)))
        finally:
            for client in self.clients.values():
                await client.aclose()
            for lease in self.leases:
                await lease.release()

    async def _work(self) -> None:
        while len(self.done) < self.site.pages and self.leases:
            try:
                page = await asyncio.wait_for(self.queue.get(), 1.0)
            except TimeoutError:
                continue
            links = await self._fetch(page)
            if links is None:
                self.queue.put_nowait(page)  # refused: again, at the lowered pace or elsewhere
            elif page not in self.done:
                self.done.add(page)
                for child in links:
                    self.queue.put_nowait(child)

    async def _fetch(self, page: int) -> list[int] | None:
        """The page's links, or None when it was refused or failed."""
        lease = min(self.leases, key=lambda held: held.next_turn())
        await lease.wait_turn()
        try:
            response = await self.clients[lease.lease_id].get(f"{self.base}/page/{page}")
            if await lease.observe(response.status_code, response.headers) is not None:
                return None
        except ProxyBannedError:
            if lease in self.leases:
                self.leases.remove(lease)
                await lease.report("banned", "http_403")
                await lease.release()
            return None
        except httpx.HTTPError:
            return None
        return [int(child) for child in LINK.findall(response.text)]


async def sdk_crawl(site: Site, api: tuple[str, str], proxies: int) -> None:
    """Lease every proxy for the site, then crawl it with SdkCrawler."""
    target = site.url.split("//", 1)[1].split(":", 1)[0]
    async with AsyncPool(*api) as pool:
        leases = [await pool.acquire(target=target, ttl=600, wait=120)]
        for _ in range(proxies - 1):
            try:
                leases.append(await pool.acquire(target=target, ttl=600, wait=0))
            except NoProxyAvailableError as error:
                print(f"sdk: {len(leases)} of {proxies} proxies free: {error}")
                break
        await SdkCrawler(site, leases).run()


async def halve_then_restore(site: Site, rate: float, after: float, hold: float) -> list[float]:
    """Halve the site's rate `after` seconds from now for `hold` seconds; when each happened."""
    await asyncio.sleep(after)
    halved = time.monotonic()
    site.rate = rate / 2
    await asyncio.sleep(hold)
    site.rate = rate
    return [halved, time.monotonic()]


def report(name: str, site: Site, marks: list[float], args: argparse.Namespace) -> None:
    """One crawler's line of figures."""
    answers = sorted(
        (at, status, address) for address, replies in site.answers.items() for at, status in replies
    )
    if not answers:
        print(f"{name}: no answers")
        return
    start = answers[0][0]
    allowed = args.rate * args.proxies
    halved, restored = marks if len(marks) == 2 else (answers[-1][0], answers[-1][0])
    before = [a for a in answers if a[0] < halved and a[1] == 200]
    efficiency = len(before) / max(halved - start, 1e-9) / allowed
    share = sum(1 for a in answers if a[1] == 429) / len(answers)
    late_429 = [at for at, status, _ in answers if status == 429 and halved <= at < restored]
    settle = (late_429[-1] - halved) if late_429 else 0.0
    recovered = None
    at = restored
    while at + WINDOW <= answers[-1][0]:
        pages = sum(1 for a in answers if at <= a[0] < at + WINDOW and a[1] == 200)
        if pages / WINDOW / allowed >= 0.8:
            recovered = at + WINDOW - restored
            break
        at += 1.0
    most = 0
    for address in site.answers:
        times = [t for t, _ in site.answers[address]]
        most = max(most, *(sum(1 for u in times if t <= u < t + 1.0) for t in times))
    print(
        f"{name}: efficiency {efficiency:.2f} before the halving "
        f"({len(before)} pages in {halved - start:.0f} s; R x N = {allowed:g}/s); "
        f"429 share {share:.1%} ({len(answers)} answers); bans {1 if site.victim else 0}; "
        f"429s stopped {settle:.1f} s after the halving; "
        f"back above 0.8 {'never' if recovered is None else f'{recovered:.0f} s'} after the "
        f"restore; most requests from one address in 1 s: {most}"
    )


def print_scrapy_outcome(name: str, out: Path) -> None:
    """One Scrapy process's finish reason, pages, leases taken and given back."""
    stats_file = out / "stats.json"
    if not stats_file.exists():
        print(f"scrapy {name}: no stats (see {out / 'scrapy.log'})")
        return
    stats = json.loads(stats_file.read_text())
    items = out / "items.jsonl"
    pages = sum(1 for line in items.open() if '"page"' in line) if items.exists() else 0
    print(
        f"scrapy {name}: finish reason {stats.get('finish_reason')}; {pages} pages; "
        f"{stats.get('egress_proxies/leases', 0)} leases taken, "
        f"{stats.get('egress_proxies/leases_yielded', 0)} given back to a waiting crawler"
    )


async def crawl_once(
    name: str,
    run: Callable[[Site], Awaitable[object]],
    args: argparse.Namespace,
) -> None:
    """Serve a fresh site, crawl it with `run`, halving its rate on the way; report."""
    async with serve_site(
        rate=args.rate, ban_after=BAN_AFTER, pages=args.pages, ban_window=BAN_WINDOW
    ) as site:
        schedule = asyncio.create_task(
            halve_then_restore(site, args.rate, args.halve_after, args.halve_for)
        )
        await run(site)
        marks = await schedule if schedule.done() else []
        schedule.cancel()
    report(name, site, marks, args)


async def measure(
    args: argparse.Namespace, root: Path, progress: Progress, processes: Descendants
) -> None:
    """The cluster, the operator, the proxies; then each crawler in turn."""
    progress("starting the dev cluster" if args.cluster is None else f"on {args.cluster}")
    with dev_cluster(args, root / "cluster") as cluster:
        async with KubeClient(cluster.handle.credentials) as kube, serve_origin() as origin:
            namespace = await create_namespace(kube, "bench-crawl")
            work = root / "operator"
            work.mkdir()
            with running(cluster, namespace, work, processes) as metered:
                op = metered.process
                await wait_operator_up(op)
                health = {"url": origin.url, "expectedStatus": 200, "intervalSeconds": 5}
                names = [f"crawl-{index}" for index in range(args.proxies)]
                for name in names:
                    await kube.create(
                        proxy_path(namespace), managed_proxy(name, healthCheck=health)
                    )
                for name in names:
                    await wait_for_condition(kube, namespace, name, "Healthy", "True", timeout=300)
                progress(f"{args.proxies} proxies healthy")
                api = (op.discovery_url, op.discovery_token)
                progress("(a) Scrapy")
                await crawl_once(
                    "scrapy",
                    lambda site: scrapy_crawl(site, api, root / "a", args.proxies),
                    args,
                )
                progress("(b) SDK crawler")
                await crawl_once("sdk", lambda site: sdk_crawl(site, api, args.proxies), args)
                progress("(c) two Scrapy processes at once, each allowed the whole fleet")
                await crawl_once(
                    "two scrapy",
                    lambda site: asyncio.gather(
                        scrapy_crawl(site, api, root / "c1", args.proxies),
                        scrapy_crawl(site, api, root / "c2", args.proxies),
                    ),
                    args,
                )
                for out in ("a", "c1", "c2"):
                    print_scrapy_outcome(out, root / out)
                processes.note()
            await delete_namespace(kube, namespace)


def main() -> None:
    """Parse, run, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--proxies", type=int, default=4, help="N managed proxies")
    parser.add_argument("--rate", type=float, default=5.0, help="R pages/s per source address")
    parser.add_argument("--pages", type=int, default=2500, help="pages of the site")
    parser.add_argument("--halve-after", type=float, default=30.0, help="seconds into a crawl")
    parser.add_argument("--halve-for", type=float, default=30.0, help="seconds at R / 2")
    parser.add_argument("--smoke", action="store_true", help="a quick run for the test suite")
    add_cluster_arguments(parser)
    parser.add_argument("--keep", action="store_true", help="keep the work dir (Scrapy logs)")
    args = parser.parse_args()
    if args.smoke:
        args.proxies, args.pages, args.halve_after, args.halve_for = 2, 30, 3.0, 3.0
    if args.proxies < 1 or args.rate <= 0 or args.pages < 1:
        parser.error("need --proxies >= 1, --rate > 0 and --pages >= 1")
    progress, processes = Progress(), Descendants()
    root = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    try:
        asyncio.run(measure(args, root, progress, processes))
    finally:
        processes.note()
        killed = processes.kill_survivors()
        if args.keep:
            progress(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        progress(f"cleaned up; processes left running and killed now: {killed or 'none'}")


if __name__ == "__main__":
    main()
