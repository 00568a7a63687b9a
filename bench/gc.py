"""GC sweep cost: the sweep's reading and planning with 1,000 stacks ÷ with 100 (target ≤ 12).

Run: `.venv/bin/python -m bench.gc [--smoke] [--backend file|postgres|s3]`
(`--smoke`: 10 and 100 stacks, one sweep each, in a second; `--backend`:
file:// by default, or a real PostgreSQL / versitygw on loopback, as the
tests start them). The backend holds N checkpoints in pulumi's DIY layout,
each shaped like a real squid-pod stack (a Stack with its outputs, the
provider, a ConfigMap, a Secret and a Pod; about 22 KB, the size the dev
cluster's stacks have). The inventory listing is built in
memory: in a real sweep it is one list call per kind, whatever N is. Times
are the median of several sweeps; only the ratio is meant to travel.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import psycopg

from egress_proxies.gc.plan import LiveProxy, plan_sweep
from egress_proxies.gc.sweeper import read_stack_records
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryListing,
    TaggedInstance,
)
from egress_proxies.stacks.backends import StateBackend, open_backend, parse_backend_url
from egress_proxies.stacks.naming import PROJECT
from harness.postgres import PostgresServer
from harness.s3 import S3Server

Writer = Callable[[dict[str, bytes]], None]  # checkpoint key -> document

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


def populate(
    backend: StateBackend, write: Writer, count: int
) -> tuple[StateBackend, list[LiveProxy], InventoryListing]:
    """`count` stacks written to the backend, their live Proxies and the provider listing."""
    proxies, instances, documents = [], [], {}
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    for index in range(count):
        stack, uid = f"crawl.p{index}", f"uid-{index}"
        key = f".pulumi/stacks/{PROJECT}/{stack}.json"
        documents[key] = json.dumps(checkpoint(stack, uid)).encode()
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
    write(documents)
    return backend, proxies, InventoryListing(ProviderName.KUBERNETES, tuple(instances))


@contextlib.contextmanager
def file_backend(count: int) -> Iterator[tuple[StateBackend, Writer]]:
    """A file:// backend in a temporary directory."""
    del count
    with tempfile.TemporaryDirectory() as tmp:

        def write(documents: dict[str, bytes]) -> None:
            for key, document in documents.items():
                path = Path(tmp) / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(document)

        yield open_backend(parse_backend_url(f"file://{tmp}"), Path(tmp), PROJECT), write


@contextlib.contextmanager
def postgres_backend(count: int) -> Iterator[tuple[StateBackend, Writer]]:
    """pulumi's PostgreSQL table in a real PostgreSQL on loopback."""
    with PostgresServer() as server:
        os.environ.update(server.env)
        table = f"bench_{count}"
        backend = open_backend(parse_backend_url(f"{server.url}&table={table}"), Path(), PROJECT)
        backend.check()

        def write(documents: dict[str, bytes]) -> None:
            rows = [
                (f"postgres/{key}", json.dumps({"data": base64.b64encode(doc).decode()}))
                for key, doc in documents.items()
            ]
            conninfo = server.url.replace("postgres://", "postgresql://")
            with psycopg.connect(conninfo, password=server.password) as connection:
                connection.cursor().executemany(
                    f"INSERT INTO {table} (key, data) VALUES (%s, %s)",  # noqa: S608
                    rows,
                )

        yield backend, write


@contextlib.contextmanager
def s3_backend(count: int) -> Iterator[tuple[StateBackend, Writer]]:
    """A bucket on a real versitygw on loopback."""
    with S3Server() as server:
        os.environ.update(server.env)
        bucket = f"bench-{count}"
        server.create_bucket(bucket)
        backend = open_backend(parse_backend_url(server.url(bucket, "op")), Path(), PROJECT)
        client = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
        )

        def write(documents: dict[str, bytes]) -> None:
            with ThreadPoolExecutor(16) as pool:
                list(
                    pool.map(
                        lambda item: client.put_object(
                            Bucket=bucket, Key=f"op/{item[0]}", Body=item[1]
                        ),
                        documents.items(),
                    )
                )

        yield backend, write


BACKENDS = {"file": file_backend, "postgres": postgres_backend, "s3": s3_backend}


def sweep_seconds(kind: str, count: int, repeats: int) -> float:
    """Median time to read every stack and plan the sweep."""
    with BACKENDS[kind](count) as (empty, write):
        backend, proxies, listing = populate(empty, write, count)
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
            assert len(stacks) == count
            assert not plan.delete and not plan.destroy_stacks and not plan.reconcile
        return statistics.median(times)


def main() -> None:
    """Print the measurements and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="10 and 100 stacks, one sweep each")
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="file")
    args = parser.parse_args()
    (small_count, large_count), repeats = (SMOKE_SIZES, 1) if args.smoke else (SIZES, REPEATS)
    small = sweep_seconds(args.backend, small_count, repeats)
    large = sweep_seconds(args.backend, large_count, repeats)
    print(f"backend: {args.backend}")
    print(f"{SWEEP} {small_count:5} stacks: {small * 1000:8.1f} ms (median of {repeats})")
    print(f"{SWEEP} {large_count:5} stacks: {large * 1000:8.1f} ms")
    scale = large_count / small_count
    print(
        f"{RATIO} {large_count} / {small_count}: {large / small:.2f}  "
        f"(target <= {1.2 * scale:g}; {scale:g} would be linear)"
    )


if __name__ == "__main__":
    main()
