"""The console's JSON bodies, built from plain values: the fleet, sites, cooldowns, pools, leases.

Pure functions: the handlers (handlers.py) gather the Proxy bodies, the lease
book, the history and the pools, and these shape what the page renders.
Times are epoch seconds; the page formats them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from egress_proxies.catalog import ProxyKey
from egress_proxies.console.eventlog import EventLog
from egress_proxies.console.history import History
from egress_proxies.console.leasebook import PACE_FRESH, LeaseFacts, TargetBook
from egress_proxies.console.pools import PoolView
from egress_proxies.console.sampler import LATENCY, PACE
from egress_proxies.leases import Cooling
from egress_proxies.model import HEALTHY, READY
from egress_proxies.pool_model import POOL_KIND
from egress_proxies.vocabulary import DRAINING_ANNOTATION, POOL_LABEL

JsonObject = dict[str, Any]
SPARKLINE_POINTS = 30
MAX_EVENTS_SHOWN = 5


def _condition(status: Mapping[str, Any], kind: str) -> str | None:
    for condition in status.get("conditions") or ():
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def _address(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
    endpoint = spec.get("endpoint")
    if spec.get("mode") == "External" and endpoint:
        return f"{endpoint.get('host')}:{endpoint.get('port')}"
    if status.get("ip") and status.get("port"):
        return f"{status['ip']}:{status['port']}"
    return None


def proxy_facts(body: Mapping[str, Any]) -> JsonObject:
    """What a Fleet row shows of a Proxy's body: identity, state, address, limits."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    return {
        "key": f"{meta['namespace']}/{meta['name']}",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "pool": (meta.get("labels") or {}).get(POOL_LABEL),
        "provider": spec.get("provider") or "external",
        "phase": status.get("phase"),
        "ready": _condition(status, READY),
        "healthy": _condition(status, HEALTHY),
        "latencyMillis": status.get("latencyMillis"),
        "address": _address(spec, status),
        "maxLeases": spec.get("maxLeases", 1),
        "createdAt": meta.get("creationTimestamp"),
        "cordoned": bool(spec.get("cordoned")),
        "draining": bool((meta.get("annotations") or {}).get(DRAINING_ANNOTATION)),
        "attributes": spec.get("attributes") or {},
    }


def fleet_view(
    facts: Iterable[JsonObject],
    leases: Mapping[ProxyKey, int],
    cooldowns: Iterable[Cooling],
    book: LeaseFacts,
    history: History,
    now: float,
) -> JsonObject:
    """Every Proxy (`proxy_facts` of each body) with its load, trouble and latency sparkline."""
    cooling: dict[ProxyKey, int] = {}
    for pair in cooldowns:
        cooling[pair.proxy] = cooling.get(pair.proxy, 0) + 1
    rows = [
        row
        | {
            "leases": leases.get(row["key"], 0),
            "cooldowns": cooling.get(row["key"], 0),
            "bansLastDay": book.bans_last_day(row["key"]),
            "latencyHistory": history.series((LATENCY, row["key"]), SPARKLINE_POINTS),
        }
        for row in sorted(facts, key=lambda row: str(row["key"]))
    ]
    return {"now": now, "proxies": rows, "count": len(rows)}


def _site_summary(target: str, book: TargetBook, now: float) -> JsonObject:
    ok, limited, banned = book.report_counts(now)
    reports = ok + limited + banned
    return {
        "target": target,
        "fleetPace": round(book.fleet_pace(now), 3),
        "proxies": sum(1 for _, seen in book.paces.values() if now - seen <= PACE_FRESH),
        "lastLoweredAt": book.lowered_at,
        "rateLimitedShare": round(limited / reports, 4) if reports else 0.0,
        "bannedShare": round(banned / reports, 4) if reports else 0.0,
        "reports": {"ok": ok, "rateLimited": limited, "banned": banned},
        "waitingHeld": book.waiting_held,
    }


def sites_view(book: LeaseFacts, now: float) -> JsonObject:
    """Every target seen, with the pace the fleet learned for it and its trouble."""
    leases_by_target: dict[str, int] = {}
    for lease in book.leases():
        if lease.target is not None:
            leases_by_target[lease.target] = leases_by_target.get(lease.target, 0) + 1
    sites = [
        _site_summary(target, target_book, now) | {"leases": leases_by_target.get(target, 0)}
        for target, target_book in sorted(book.targets().items())
    ]
    return {"now": now, "sites": sites, "count": len(sites)}


def site_view(target: str, book: LeaseFacts, history: History, now: float) -> JsonObject | None:
    """One target: the summary, each proxy's pace, and the pace over the last hour."""
    target_book = book.targets().get(target)
    if target_book is None:
        return None
    paces = [
        {"proxy": key, "pace": round(rate, 3), "seenAt": seen}
        for key, (rate, seen) in sorted(target_book.paces.items())
    ]
    return _site_summary(target, target_book, now) | {
        "now": now,
        "paces": paces,
        "paceHistory": {
            "spanSeconds": history.span,
            "times": history.times(),
            "values": _rounded(history.series((PACE, target))),
        },
        "rateLimits": list(target_book.rate_limits),
    }


def cooldowns_view(cooldowns: Iterable[Cooling], now: float) -> JsonObject:
    """Which proxies cool down (or are banned) for which sites, and until when."""
    rows = [
        {
            "proxy": pair.proxy,
            "target": pair.target,
            "until": pair.until,
            "secondsLeft": round(pair.until - now, 1),
            "kind": "banned" if pair.from_ban else "rate_limited",
        }
        for pair in sorted(cooldowns, key=lambda pair: (pair.proxy, pair.target or ""))
    ]
    return {"now": now, "cooldowns": rows, "count": len(rows)}


def pools_view(pools: Sequence[PoolView], events: EventLog, now: float) -> JsonObject:
    """Every pool: replicas, ready, leased, draining, template hash and its last Events."""
    rows = [
        {
            "key": f"{pool.namespace}/{pool.name}",
            "namespace": pool.namespace,
            "name": pool.name,
            "replicas": pool.replicas,
            "current": pool.current,
            "ready": pool.ready,
            "leased": pool.leased,
            "draining": pool.draining,
            "updated": pool.updated,
            "minReplicas": pool.min_replicas,
            "maxReplicas": pool.max_replicas,
            "templateHash": pool.template_hash,
            "lastScaleTime": pool.last_scale_time,
            "events": [
                {"at": e.at, "type": e.type, "reason": e.reason, "message": e.message}
                for e in events.of(POOL_KIND, pool.namespace, pool.name)[:MAX_EVENTS_SHOWN]
            ],
        }
        for pool in pools
    ]
    return {"now": now, "pools": rows, "count": len(rows)}


def leases_view(book: LeaseFacts, now: float) -> JsonObject:
    """The live leases: the holder's token name, proxy, target, age and time left."""
    rows = [
        {
            "leaseId": lease.lease_id[:6] + "…",  # enough to tell apart, useless to a thief
            "holder": lease.holder,
            "proxy": lease.proxy,
            "target": lease.target,
            "ageSeconds": round(now - lease.granted_at, 1),
            "ttlLeftSeconds": round(lease.expires_at - now, 1),
        }
        for lease in book.leases()
    ]
    return {"now": now, "leases": rows, "count": len(rows)}


def _rounded(values: list[float | None]) -> list[float | None]:
    return [None if value is None else round(value, 3) for value in values]
