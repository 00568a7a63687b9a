"""What a ServiceAccount may do (`kubectl auth can-i --list`) and what it did (the audit log)."""

from __future__ import annotations

import json
from pathlib import Path


def granted(can_i: str) -> set[tuple[str, str]]:
    """(resource, verb) pairs from `kubectl auth can-i --list`, resource rules only."""
    pairs: set[tuple[str, str]] = set()
    for line in can_i.splitlines()[1:]:
        columns = line.split()
        if not columns or columns[0].startswith("["):
            continue  # a non-resource URL
        verbs = line[line.rindex("[") + 1 : line.rindex("]")].split()
        pairs.update((columns[0], verb) for verb in verbs)
    return pairs


def audited(audit_log: Path, user: str) -> set[tuple[str, str]]:
    """(resource, verb) pairs the API server's audit log shows `user` making.

    A server-side apply that creates its object is a PATCH answered 201, which
    the API server authorizes as `create` as well as `patch`
    (pulumi-kubernetes creates the squid pod's objects so): counted as both.
    """
    pairs: set[tuple[str, str]] = set()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef")
        if event["user"]["username"] != user or not ref:
            continue
        # As `can-i --list` names them: resource.group/subresource.
        resource = ref["resource"]
        if ref.get("apiGroup"):
            resource += "." + ref["apiGroup"]
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        pairs.add((resource, event["verb"]))
        if event["verb"] == "patch" and event.get("responseStatus", {}).get("code") == 201:
            pairs.add((resource, "create"))
    return pairs
