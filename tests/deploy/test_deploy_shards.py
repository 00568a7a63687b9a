"""deploy/shards/: two operator shards in one install, kept apart by name, volume and selector."""

from __future__ import annotations

import pytest

from egress_proxies.cli import build_parser, read_options
from egress_proxies.operator.factories import shard_of
from egress_proxies.settings import RunSettings
from tests.deploy.test_deploy_manifests import DEPLOY, NAMESPACE, kustomize, objects

pytestmark = pytest.mark.integration


def test_the_shards_overlay_runs_two_operators_that_share_nothing() -> None:
    built = objects(kustomize(DEPLOY / "shards"))
    deployments = {name: obj for (kind, name), obj in built.items() if kind == "Deployment"}
    assert set(deployments) == {"egress-proxies", "egress-proxies-shard-b"}
    seen: dict[str, tuple[str, str, str]] = {}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        settings = read_options(build_parser().parse_args(container["args"]), RunSettings)
        shard = shard_of(settings)
        assert shard is not None
        (claim,) = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        ]
        seen[shard.name] = (name, claim, pod["serviceAccountName"])
        assert ("PersistentVolumeClaim", claim) in built
        # The Deployment's and the Service's selectors pick this shard's pod only.
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["egress-proxies/shard"] == shard.name
        assert deployment["spec"]["selector"]["matchLabels"]["egress-proxies/shard"] == shard.name
        service = built[("Service", name)]
        assert service["spec"]["selector"]["egress-proxies/shard"] == shard.name
        assert service["metadata"]["namespace"] == NAMESPACE
    assert seen == {
        "a": ("egress-proxies", "egress-proxies-state", "egress-proxies"),
        "b": ("egress-proxies-shard-b", "egress-proxies-state-shard-b", "egress-proxies-shard-b"),
    }
    binding = built[("ClusterRoleBinding", "egress-proxies-shard-b")]
    assert binding["roleRef"]["name"] == "egress-proxies-shard-b"
    assert binding["subjects"][0]["name"] == "egress-proxies-shard-b"
    # One copy of each cluster-wide object.
    assert sum(kind == "CustomResourceDefinition" for kind, _ in built) == 4
