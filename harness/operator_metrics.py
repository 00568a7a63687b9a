"""What a running operator's metrics say, for tests that wait on its work rather than on time."""

from __future__ import annotations

import re

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from harness.operator import OperatorProcess

_SWEEPS = re.compile(r"GC sweep (finished|skipped)")


async def converged_rounds(operator: OperatorProcess, pool: str) -> float:
    """The running operator's converged rounds of `pool` ("namespace/name"; 0 at each start)."""
    try:
        async with aiohttp.ClientSession() as session, session.get(operator.metrics_url) as got:
            text = await got.text()
    except aiohttp.ClientError:
        return 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "egress_proxies_pool_rounds_total"
                and labels.get("pool") == pool
                and labels.get("outcome") == "converged"
            ):
                return float(sample.value)
    return 0.0


def gc_sweeps(operator: OperatorProcess) -> int:
    """The GC sweeps this operator has finished or skipped, from its log."""
    return len(_SWEEPS.findall(operator.log_text()))
