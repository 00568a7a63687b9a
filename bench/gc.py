"""GC sweep cost: the sweep's reading and planning with 1,000 stacks ÷ with 100 (target ≤ 12).

Run: `.venv/bin/python -m bench.gc [--smoke]` (`--smoke`: 10 and 100 stacks, one sweep
each, in a second). The backend holds N checkpoint files in
pulumi's DIY layout, each shaped like a real squid-pod stack (a Stack with
its outputs, the provider, a ConfigMap, a Secret and a Pod; about 22 KB, the
size the dev cluster's stacks have). The inventory listing is built in
memory: in a real sweep it is one list call per kind, whatever N is. Times
are the median of several sweeps; only the ratio is meant to travel.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
import time
from pathlib import Path

from egress_proxies.gc.plan import LiveProxy, plan_sweep
from egress_proxies.gc.sweeper import read_stack_records
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryListing,
    TaggedInstance,
)
from egress_proxies.stacks.backends import FileBackend
from egress_proxies.stacks.naming import PROJECT

REPEATS = 7
SIZES = (100, 1000)
SMOKE_SIZES = (10, 100)

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
SWEEP = "sweep with"
RATIO = "ratio"
FIGURES = (SWEEP, RATIO)
_PADDING = "x" * 4000  # resource inputs/outputs of realistic size


def checkpoint(stack: str, uid: str) -> dict[str, object]:
    """One stack's checkpoint, shaped like the ones pulumi writes for a squid pod."""
    outputs = {
        "ip": "127.9.0.2",
        "port": 3128,
        "instanceId": f"pods/crawl/{uid}",
        "proxyUid": uid,
        "provider": "kubernetes",
        "specHash": "0" * 32,
    }
    resources: list[dict[str, object]] = [
        {
            "urn": f"urn:pulumi:{stack}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{stack}",
            "type": "pulumi:pulumi:Stack",
            "outputs": outputs,
        }
    ]
    for kind in (
        "pulumi:providers:kubernetes",
        "kubernetes:core/v1:ConfigMap",
        "kubernetes:core/v1:Secret",
        "kubernetes:core/v1:Pod",
    ):
        resources.append(
            {
                "urn": f"urn:pulumi:{stack}::{PROJECT}::{kind}::x",
                "type": kind,
                "inputs": {"padding": _PADDING},
                "outputs": {"padding": _PADDING},
            }
        )
    return {
        "version": 3,
        "checkpoint": {
            "stack": f"organization/{PROJECT}/{stack}",
            "latest": {"resources": resources},
        },
    }


def populate(root: Path, count: int) -> tuple[FileBackend, list[LiveProxy], InventoryListing]:
    """A backend with `count` stacks, their live Proxies and the provider listing."""
    backend = FileBackend(root, PROJECT)
    directory = root / ".pulumi" / "stacks" / PROJECT
    directory.mkdir(parents=True)
    proxies, instances = [], []
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    for index in range(count):
        stack, uid = f"crawl.p{index}", f"uid-{index}"
        (directory / f"{stack}.json").write_text(json.dumps(checkpoint(stack, uid)))
        proxies.append(LiveProxy(stack, uid))
        instances.append(
            TaggedInstance(
                ProviderName.KUBERNETES,
                InstanceId(f"pods/crawl/{uid}"),
                uid,
                created,
                InstanceState.RUNNING,
            )
        )
    return backend, proxies, InventoryListing(ProviderName.KUBERNETES, tuple(instances))


def sweep_seconds(count: int, repeats: int) -> float:
    """Median time to read every stack and plan the sweep."""
    with tempfile.TemporaryDirectory() as tmp:
        backend, proxies, listing = populate(Path(tmp), count)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            stacks = read_stack_records(backend)
            plan = plan_sweep(
                proxies,
                stacks,
                {ProviderName.KUBERNETES: listing},
                now=datetime.datetime.now(datetime.UTC),
                min_age=datetime.timedelta(minutes=10),
            )
            times.append(time.perf_counter() - started)
            assert not plan.delete and not plan.destroy_stacks and not plan.reconcile
        return statistics.median(times)


def main() -> None:
    """Print the measurements and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="10 and 100 stacks, one sweep each")
    args = parser.parse_args()
    (small_count, large_count), repeats = (SMOKE_SIZES, 1) if args.smoke else (SIZES, REPEATS)
    small, large = sweep_seconds(small_count, repeats), sweep_seconds(large_count, repeats)
    print(f"{SWEEP} {small_count:5} stacks: {small * 1000:8.1f} ms (median of {repeats})")
    print(f"{SWEEP} {large_count:5} stacks: {large * 1000:8.1f} ms")
    scale = large_count / small_count
    print(
        f"{RATIO} {large_count} / {small_count}: {large / small:.2f}  "
        f"(target <= {1.2 * scale:g}; {scale:g} would be linear)"
    )


if __name__ == "__main__":
    main()
