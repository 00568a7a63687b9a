"""deploy/: the kustomize base builds, carries the current CRD, and the API server accepts it.

Docker and kind cannot run here, so everything else of the install path is
checked as far as it can be: the built objects' invariants, the kind overlay,
a server-side dry-run apply on the dev cluster, the image's pinned versions
against the toolchain's, and the quickstart script with shellcheck.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from egress_proxies import crd, toolchain
from egress_proxies.cli import build_parser, read_options
from egress_proxies.kube import ConflictError, KubeApiError, KubeClient
from egress_proxies.kube.resources import NAMESPACES, SERVICE_ACCOUNTS
from egress_proxies.settings import DiscoverySettings, RunSettings
from tests.conftest import ClusterHandle

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "egress-proxies"


def kustomize(directory: Path) -> str:
    """`kubectl kustomize DIR`, as a user would run it."""
    done = subprocess.run(
        [str(toolchain.find("kubectl")), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def objects(manifests: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(manifests) if o}


def test_the_crd_copy_is_current() -> None:
    assert (DEPLOY / "base" / "crd" / "proxy.yaml").read_text() == crd.render(), (
        "deploy/base/crd/proxy.yaml is stale: run `cp crds/proxy.yaml deploy/base/crd/` "
        "(kustomize loads no file from outside deploy/base/)"
    )


def test_the_pool_crd_copy_is_current() -> None:
    assert (DEPLOY / "base" / "crd" / "proxypool.yaml").read_text() == crd.render_pool(), (
        "deploy/base/crd/proxypool.yaml is stale: run `cp crds/proxypool.yaml deploy/base/crd/`"
    )


def test_the_peering_crd_copy_is_current() -> None:
    copy = DEPLOY / "base" / "crd" / "kopf-peering.yaml"
    assert copy.read_text() == (ROOT / "crds" / "kopf-peering.yaml").read_text(), (
        "deploy/base/crd/kopf-peering.yaml is stale: run `cp crds/kopf-peering.yaml "
        "deploy/base/crd/`"
    )


def test_the_base_builds_the_whole_install() -> None:
    built = objects(kustomize(DEPLOY))
    assert set(built) == {
        ("Namespace", NAMESPACE),
        ("CustomResourceDefinition", "proxies.crawl.example.com"),
        ("CustomResourceDefinition", "proxypools.crawl.example.com"),
        ("CustomResourceDefinition", "clusterkopfpeerings.kopf.dev"),
        ("CustomResourceDefinition", "kopfpeerings.kopf.dev"),
        ("ServiceAccount", "egress-proxies"),
        ("ClusterRole", "egress-proxies"),
        ("ClusterRole", "egress-proxies-pool-editor"),
        ("ClusterRoleBinding", "egress-proxies"),
        ("PersistentVolumeClaim", "egress-proxies-state"),
        ("Deployment", "egress-proxies"),
        ("Service", "egress-proxies"),
    }
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for (kind, _), obj in built.items():
        assert obj["metadata"].get("namespace") == (None if kind in cluster_scoped else NAMESPACE)
    generated = yaml.safe_load(crd.render())
    shipped = built[("CustomResourceDefinition", "proxies.crawl.example.com")]
    assert shipped["spec"] == generated["spec"]
    subject = built[("ClusterRoleBinding", "egress-proxies")]["subjects"][0]
    assert subject == {"kind": "ServiceAccount", "name": "egress-proxies", "namespace": NAMESPACE}


def test_the_deployment_keeps_its_invariants() -> None:
    built = objects(kustomize(DEPLOY))
    deployment = built[("Deployment", "egress-proxies")]
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert pod["hostname"] == "egress-proxies"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"] == "egress-proxies:0.1.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {port["name"]: port["containerPort"] for port in container["ports"]} == {
        "liveness": 8080,
        "discovery": 8090,
        "metrics": 9090,
    }
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    # Ready once the fleet is whole (its watches synced) and the lease store answers.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "discovery"}
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts == {
        "state": "/var/lib/egress-proxies",
        "tmp": "/tmp",
        "passphrase": "/etc/egress-proxies/passphrase",
        "discovery-tokens": "/etc/egress-proxies/discovery-tokens",
    }
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"passphrase": "stack-passphrase", "discovery-tokens": "discovery-tokens"}
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["EGRESS_PROXIES_PASSPHRASE_FILE"] == "/etc/egress-proxies/passphrase/passphrase"
    service = built[("Service", "egress-proxies")]
    assert {port["name"] for port in service["spec"]["ports"]} == {"discovery", "metrics"}


def test_the_deployment_runs_a_command_the_cli_accepts() -> None:
    deployment = objects(kustomize(DEPLOY))[("Deployment", "egress-proxies")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "run"
    settings = read_options(args, RunSettings)
    assert settings.state_dir == Path("/var/lib/egress-proxies")
    assert settings.discovery_tokens_dir == Path("/etc/egress-proxies/discovery-tokens")
    ports = (settings.liveness_port, settings.discovery_port, settings.metrics_port)
    assert ports == (8080, 8090, 9090)


def test_the_kind_overlay_puts_the_state_on_the_mounted_dir() -> None:
    built = objects(kustomize(DEPLOY / "kind"))
    volume = built[("PersistentVolume", "egress-proxies-state")]
    claim = built[("PersistentVolumeClaim", "egress-proxies-state")]
    assert claim["spec"]["volumeName"] == "egress-proxies-state"
    assert claim["spec"]["storageClassName"] == volume["spec"]["storageClassName"] == ""
    assert volume["spec"]["claimRef"] == {"namespace": NAMESPACE, "name": "egress-proxies-state"}
    cluster = yaml.safe_load((DEPLOY / "kind" / "cluster.yaml").read_text())
    (mount,) = cluster["nodes"][0]["extraMounts"]
    assert volume["spec"]["hostPath"]["path"] == mount["containerPath"]
    (container,) = built[("Deployment", "egress-proxies")]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "egress-proxies:kind"


def dry_run_apply(kubeconfig: Path, demo_namespace: str) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --server-side --dry-run=server` of everything deploy/ ships.

    The kind quickstart's Squid goes into `demo_namespace` instead of its own.
    """
    squid = [
        {**o, "metadata": {**o["metadata"], "namespace": demo_namespace}}
        for o in yaml.safe_load_all((DEPLOY / "kind" / "external-squid.yaml").read_text())
        if o["kind"] != "Namespace"
    ]
    manifests = "\n---\n".join(
        [
            kustomize(DEPLOY),
            kustomize(DEPLOY / "kind"),
            (DEPLOY / "secrets.example.yaml").read_text(),
            yaml.safe_dump_all(squid),
        ]
    )
    return subprocess.run(
        [
            str(toolchain.find("kubectl")),
            "apply",
            "--server-side",
            "--dry-run=server",
            "--field-manager=deploy-manifests-test",
            "-f",
            "-",
        ],
        input=manifests,
        capture_output=True,
        text=True,
        timeout=120,
        env={**toolchain.environment_with_tools(), "KUBECONFIG": str(kubeconfig)},
        check=False,
    )


async def operator_namespace(kube: KubeClient) -> None:
    """The operator's namespace for real, with deploy/'s labels (a dry run creates nothing)."""
    shipped = yaml.safe_load((DEPLOY / "base" / "namespace.yaml").read_text())
    labels = shipped["metadata"]["labels"]
    try:
        await kube.create(NAMESPACES.path(), {"metadata": {"name": NAMESPACE, "labels": labels}})
    except ConflictError:
        await kube.patch(NAMESPACES.path(name=NAMESPACE), {"metadata": {"labels": labels}})


async def test_the_api_server_accepts_the_manifests(
    dev_cluster: ClusterHandle, kube: KubeClient, namespace: str
) -> None:
    await operator_namespace(kube)
    done = await asyncio.to_thread(dry_run_apply, dev_cluster.kubeconfig, namespace)
    assert done.returncode == 0, done.stderr
    assert "PodSecurity" not in done.stderr, done.stderr
    assert "deployment.apps/egress-proxies serverside-applied (server dry run)" in done.stdout
    assert (
        "persistentvolume/egress-proxies-state serverside-applied (server dry run)" in done.stdout
    )


def test_the_image_pins_the_toolchain_versions() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.MULTILINE))
    versions = dict(
        re.findall(r"^(\w+)=(\S+)$", (ROOT / "tools" / "versions.env").read_text(), re.MULTILINE)
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(
        dependency.split("==") for dependency in project["dependencies"] if "==" in dependency
    )
    assert f"v{args['PULUMI_VERSION']}" == versions["PULUMI_VERSION"]
    assert f"v{args['PULUMI_KUBERNETES_VERSION']}" == versions["PULUMI_KUBERNETES_VERSION"]
    assert args["PULUMI_KUBERNETES_VERSION"] == pins["pulumi-kubernetes"]
    assert args["PULUMI_GCP_VERSION"] == pins["pulumi-gcp"]


def test_the_quickstart_and_the_demo_pass_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck is missing: `make tools` installs it from Debian"
    scripts = ("deploy/kind/quickstart.sh", "deploy/lib/quickstart-steps.sh", "scripts/demo.sh")
    done = subprocess.run(
        [shellcheck, "--external-sources", *scripts],
        cwd=DEPLOY.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout


async def test_the_operator_pod_passes_restricted_admission(
    dev_cluster: ClusterHandle, kube: KubeClient
) -> None:
    await operator_namespace(kube)
    # The ServiceAccount admission plugin checks the pod's account exists, even in a dry run.
    with contextlib.suppress(ConflictError):
        await kube.create(SERVICE_ACCOUNTS.path(NAMESPACE), {"metadata": {"name": NAMESPACE}})
    built = {
        (o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(kustomize(DEPLOY)) if o
    }
    template = built[("Deployment", "egress-proxies")]["spec"]["template"]
    pod = {
        "metadata": {"name": "admission-check", **template["metadata"]},
        "spec": template["spec"],
    }
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    created = await kube.request("POST", path, params={"dryRun": "All"}, body=pod)
    assert created["metadata"]["name"] == "admission-check"
    # The control: the same pod without its pod-level securityContext is refused.
    spec = {key: value for key, value in template["spec"].items() if key != "securityContext"}
    with pytest.raises(KubeApiError) as refused:
        await kube.request("POST", path, params={"dryRun": "All"}, body={**pod, "spec": spec})
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted' in str(refused.value)


def test_the_scale_out_overlay_adds_the_discovery_tier_and_a_trial_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = objects(kustomize(DEPLOY / "scale-out"))
    base = objects(kustomize(DEPLOY))
    assert set(built) - set(base) == {
        ("ServiceAccount", "egress-proxies-discovery"),
        ("ClusterRole", "egress-proxies-discovery"),
        ("ClusterRoleBinding", "egress-proxies-discovery"),
        ("Deployment", "egress-proxies-discovery"),
        ("PodDisruptionBudget", "egress-proxies-discovery"),
        ("Service", "egress-proxies-discovery"),
        ("Deployment", "egress-proxies-redis"),
        ("Service", "egress-proxies-redis"),
        ("Secret", "lease-store"),
    }
    tier = built[("Deployment", "egress-proxies-discovery")]
    labels = tier["spec"]["template"]["metadata"]["labels"]
    assert tier["spec"]["replicas"] == 2
    pdb = built[("PodDisruptionBudget", "egress-proxies-discovery")]["spec"]
    assert pdb["minAvailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    service = built[("Service", "egress-proxies-discovery")]["spec"]
    assert service["selector"].items() <= labels.items()
    (container,) = tier["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "discovery"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "discovery"}
    # The container's environment names the store (from the lease-store Secret).
    monkeypatch.setenv("EGRESS_PROXIES_LEASE_STORE", "redis://egress-proxies-redis:6379/0")
    args = build_parser().parse_args(container["args"])
    settings = read_options(args, DiscoverySettings)
    assert (args.command, settings.discovery_port) == ("discovery", 8090)
    assert settings.discovery_tokens_dir == Path("/etc/egress-proxies/discovery-tokens")
    rules = built[("ClusterRole", "egress-proxies-discovery")]["rules"]
    assert {verb for rule in rules for verb in rule["verbs"]} <= {"get", "list", "watch"}
    assert {r for rule in rules for r in rule["resources"]} == {"proxies", "secrets"}
    binding = built[("ClusterRoleBinding", "egress-proxies-discovery")]
    assert binding["subjects"][0]["name"] == tier["spec"]["template"]["spec"]["serviceAccountName"]


def test_the_operator_and_the_tier_share_one_lease_store() -> None:
    built = objects(kustomize(DEPLOY / "scale-out"))
    store = {"secretKeyRef": {"name": "lease-store", "key": "url"}}
    for name in ("egress-proxies", "egress-proxies-discovery"):
        (container,) = built[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
        env = {item["name"]: item.get("valueFrom") for item in container["env"]}
        assert env["EGRESS_PROXIES_LEASE_STORE"] == store, name
    url = base64.b64decode(built[("Secret", "lease-store")]["data"]["url"]).decode()
    redis = built[("Service", "egress-proxies-redis")]["spec"]
    assert url == f"redis://egress-proxies-redis:{redis['ports'][0]['port']}/0"


async def test_the_api_server_accepts_the_scale_out_overlay_and_its_pods_are_restricted(
    dev_cluster: ClusterHandle, kube: KubeClient
) -> None:
    await operator_namespace(kube)
    done = await asyncio.to_thread(
        subprocess.run,
        [
            str(toolchain.find("kubectl")),
            "apply",
            "--server-side",
            "--dry-run=server",
            "--field-manager=deploy-manifests-test",
            "-f",
            "-",
        ],
        input=kustomize(DEPLOY / "scale-out"),
        capture_output=True,
        text=True,
        timeout=120,
        env={**toolchain.environment_with_tools(), "KUBECONFIG": str(dev_cluster.kubeconfig)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "PodSecurity" not in done.stderr, done.stderr
    for kind in ("deployment.apps/egress-proxies-discovery", "poddisruptionbudget.policy/"):
        assert kind in done.stdout
    built = objects(kustomize(DEPLOY / "scale-out"))
    for name in ("egress-proxies-discovery", "egress-proxies-redis"):
        account = built[("Deployment", name)]["spec"]["template"]["spec"].get("serviceAccountName")
        if account:
            with contextlib.suppress(ConflictError):
                await kube.create(SERVICE_ACCOUNTS.path(NAMESPACE), {"metadata": {"name": account}})
        template = built[("Deployment", name)]["spec"]["template"]
        pod = {
            "metadata": {"name": f"{name}-check", **template["metadata"]},
            "spec": template["spec"],
        }
        created = await kube.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", params={"dryRun": "All"}, body=pod
        )
        assert created["metadata"]["name"] == f"{name}-check"


def test_the_ha_overlay_runs_two_ranked_replicas_on_a_shared_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = objects(kustomize(DEPLOY / "ha"))
    assert ("PersistentVolumeClaim", "egress-proxies-state") not in built
    deployment = built[("Deployment", "egress-proxies")]
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert "hostname" not in pod, "each pod's locks name the pod itself"
    assert pod["volumes"][0] == {"name": "state", "emptyDir": {}}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = built[("PodDisruptionBudget", "egress-proxies")]["spec"]
    assert pdb["minAvailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["containers"]
    assert container["envFrom"] == [{"secretRef": {"name": "state-backend"}}]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "EGRESS_PROXIES_LEASE_STORE" in env, "both replicas' APIs grant from one store"
    monkeypatch.setenv(
        "EGRESS_PROXIES_PEERING_LIFETIME_SECONDS", env["EGRESS_PROXIES_PEERING_LIFETIME_SECONDS"]
    )
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("EGRESS_PROXIES_STATE_BACKEND", "postgres://pulumi@db:5432/pulumi")
    settings = read_options(build_parser().parse_args(container["args"]), RunSettings)
    assert settings.priority_by_start
    assert settings.peering_lifetime == 15
    assert settings.pod_namespace == NAMESPACE
    assert settings.state_backend is not None


@pytest.mark.parametrize("overlay", ["", "kind", "scale-out", "shards", "ha"])
def test_no_pod_gets_docker_link_variables(overlay: str) -> None:
    # A Service named egress-proxies-discovery would otherwise give every pod in
    # the namespace EGRESS_PROXIES_DISCOVERY_PORT=tcp://IP:8090, which the
    # settings read as the discovery port: the tier crash-looped on the node.
    built = objects(kustomize(DEPLOY / overlay if overlay else DEPLOY))
    templates = {
        name: manifest["spec"]["template"]["spec"]
        for (kind, name), manifest in built.items()
        if kind == "Deployment"
    }
    assert templates
    assert {name: spec.get("enableServiceLinks") for name, spec in templates.items()} == {
        name: False for name in templates
    }
