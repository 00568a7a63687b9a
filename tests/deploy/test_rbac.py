"""The operator runs with the deploy/ ServiceAccount's rules, and fails visibly with less."""

from __future__ import annotations

import copy
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from egress_proxies.kube import KubeClient, write_kubeconfig
from harness.audit import audited
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from tests.conftest import ClusterHandle

pytestmark = pytest.mark.e2e

# What an operator limited with --namespace uses and a cluster-wide install
# never does (tests/deploy/test_deployed_operator.py): kopf watches Namespaces,
# and the namespace's KopfPeering it creates and keeps alive; and the orphan
# GC's list of ConfigMaps, swept here every few seconds.
SHOWN_HERE = {
    ("namespaces", "list"),
    ("namespaces", "watch"),
    *(("kopfpeerings.kopf.dev", verb) for verb in ("get", "list", "watch", "create", "patch")),
    ("configmaps", "list"),
}

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "base" / "rbac.yaml"


def deploy_cluster_role() -> dict[str, Any]:
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    role: dict[str, Any] = next(d for d in documents if d["kind"] == "ClusterRole")
    return role


def without_pod_writes(role: dict[str, Any]) -> dict[str, Any]:
    """The same role minus creating and patching pods (what the squid pod program needs)."""
    reduced = copy.deepcopy(role)
    rules = []
    for rule in reduced["rules"]:
        if "pods" in rule.get("resources", []):
            rules.append({**rule, "resources": [r for r in rule["resources"] if r != "pods"]})
            rules.append(
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            )
        else:
            rules.append(rule)
    reduced["rules"] = rules
    return reduced


async def operator_as_service_account(
    kube: KubeClient,
    dev_cluster: ClusterHandle,
    namespace: str,
    tmp_path: Path,
    role: dict[str, Any],
) -> tuple[OperatorProcess, str]:
    """Bind `role` to a fresh ServiceAccount, start the operator with its token; and its user."""
    name = f"egress-proxies-{secrets.token_hex(3)}"
    await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}}
    )
    cluster_role = {**role, "metadata": {"name": name}}
    await kube.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", cluster_role)
    await kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    issued = await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    kubeconfig = tmp_path / "service-account.kubeconfig"
    write_kubeconfig(kubeconfig, dev_cluster.credentials.with_token(issued["status"]["token"]))
    # The orphan GC sweeps (lists) every 2 s; it deletes nothing younger than 10 minutes.
    operator = new_operator(
        kubeconfig, namespace, tmp_path, extra_env={"EGRESS_PROXIES_GC_INTERVAL_SECONDS": "2"}
    )
    operator.start()
    return operator, f"system:serviceaccount:{namespace}:{name}"


async def test_the_deployed_rules_are_enough_to_provision_and_delete(
    kube: KubeClient, dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    operator, user = await operator_as_service_account(
        kube, dev_cluster, namespace, tmp_path, deploy_cluster_role()
    )
    try:
        await kube.create(proxy_path(namespace), managed_proxy("rbac"))
        body = await wait_for_condition(kube, namespace, "rbac", "Provisioned", "True")
        assert body["status"]["ip"]
        await kube.delete(proxy_path(namespace, "rbac"))
        await wait_gone(kube, proxy_path(namespace, "rbac"))
        assert "forbidden" not in operator.log_text().lower()
    finally:
        operator.stop()
    used = audited(dev_cluster.layout.audit_log, user)
    print("used with --namespace:", sorted(used))
    assert used >= SHOWN_HERE, sorted(SHOWN_HERE - used)


async def test_a_missing_rule_fails_visibly(
    kube: KubeClient, dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    operator, _ = await operator_as_service_account(
        kube, dev_cluster, namespace, tmp_path, without_pod_writes(deploy_cluster_role())
    )
    try:
        await kube.create(proxy_path(namespace), managed_proxy("restricted"))
        body = await wait_for_condition(
            kube, namespace, "restricted", "Provisioned", "False", "PermanentError"
        )
        assert body["status"]["phase"] == "Failed"
        condition = next(c for c in body["status"]["conditions"] if c["type"] == "Provisioned")
        assert "forbidden" in condition["message"].lower(), condition["message"]
    finally:
        operator.stop()
