"""The kstatus of real objects, computed by `kstatus` (tools/go/kstatus over sigs.k8s.io/cli-utils).

What Argo CD, Flux and kpt would say about a Proxy or a pool: the tests ask
the library those tools use, not a Python imitation of its rules.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from egress_proxies import toolchain
from egress_proxies.kube import KubeClient


@dataclass(frozen=True)
class KStatus:
    """kstatus' verdict: InProgress, Current, Failed, Terminating, ... and why."""

    status: str
    message: str


async def _run(*args: str, stdin: bytes | None = None) -> KStatus:
    process = await asyncio.create_subprocess_exec(
        str(toolchain.find("kstatus")),
        "-o",
        "json",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate(stdin)
    assert process.returncode == 0, err.decode()
    answer = json.loads(out)
    return KStatus(answer["status"], answer["message"])


async def kstatus(body: Mapping[str, Any]) -> KStatus:
    """The kstatus of an object as read (its JSON on the program's stdin)."""
    return await _run(stdin=json.dumps(body).encode())


async def kstatus_fetched(kubeconfig: Path, namespace: str, resource: str) -> KStatus:
    """The kstatus of `RESOURCE.VERSION.GROUP/NAME`, fetched by the program itself."""
    return await _run("--kubeconfig", str(kubeconfig), "-n", namespace, resource)


async def kstatus_until(
    kube: KubeClient, path: str, wanted: str, timeout: float = 240.0
) -> list[KStatus]:
    """Poll the object's kstatus until it is `wanted`; every distinct verdict seen, in order."""
    seen: list[KStatus] = []
    deadline = time.monotonic() + timeout
    while not seen or seen[-1].status != wanted:
        assert time.monotonic() < deadline, f"kstatus never {wanted}: {seen}"
        verdict = await kstatus(await kube.get(path))
        if not seen or seen[-1].status != verdict.status:
            seen.append(verdict)
        await asyncio.sleep(0.2)
    return seen
