"""deploy/ applied to a dev cluster the way the kind quickstart applies it to kind.

The one difference is the overlay the dev cluster needs, as kind needs
deploy/kind: the images `tools/images.sh` built (the operator's, and squid's
for the Proxies that name no image). The volume comes from deploy/kind's
hostPath PersistentVolume, which the dev cluster's node mounts as kind's does.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from egress_proxies import toolchain
from egress_proxies.devcluster.node import image_ref
from egress_proxies.toolchain import MissingToolError

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "egress-proxies"
OPERATOR_LABEL = "app.kubernetes.io/name=egress-proxies"


@dataclass(frozen=True)
class Deployed:
    """An operator installed from deploy/: where its API is and the token that opens it."""

    kubeconfig: Path
    token_name: str
    token: str
    namespace: str = NAMESPACE

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """kubectl against the cluster; stdout (and stderr) as text."""
        return kubectl(self.kubeconfig, *args, stdin=stdin, check=check)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> str:
    """Run kubectl with this kubeconfig; raise with its stderr when it fails and `check`."""
    result = subprocess.run(
        [str(toolchain.find("kubectl")), *args],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout + result.stderr


def write_dev_overlay(directory: Path, base: Path = REPO / "deploy" / "kind") -> Path:
    """A kustomization over `base` with the dev cluster's images; returns its directory."""
    directory.mkdir(parents=True, exist_ok=True)
    images = []
    for image, local in (("egress-proxies", "operator"), ("redis", "redis")):
        try:
            name, _, tag = image_ref(local).rpartition(":")
        except MissingToolError:
            continue  # not built: an overlay that needs it fails to pull, as on any node
        images.append({"name": image, "newName": name, "newTag": tag})
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(base, directory)],
        "images": images,
        "patches": [
            {
                # The operators (every shard's), not the discovery tier or Redis.
                "target": {"kind": "Deployment", "labelSelector": OPERATOR_LABEL},
                "patch": yaml.safe_dump(
                    [
                        {
                            "op": "add",
                            "path": "/spec/template/spec/containers/0/env/-",
                            "value": {
                                "name": "EGRESS_PROXIES_SQUID_IMAGE",
                                "value": image_ref("squid"),
                            },
                        }
                    ]
                ),
            }
        ],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return directory


def create_secrets(kubeconfig: Path, token_name: str, token: str) -> None:
    """The two Secrets the base reads, created as the quickstart creates them."""
    kubectl(kubeconfig, "apply", "-f", str(REPO / "deploy" / "base" / "namespace.yaml"))
    for secret, literal in (
        ("stack-passphrase", f"passphrase={secrets.token_urlsafe(32)}"),
        ("discovery-tokens", f"{token_name}={token}"),
    ):
        manifest = kubectl(
            kubeconfig,
            "-n",
            NAMESPACE,
            "create",
            "secret",
            "generic",
            secret,
            f"--from-literal={literal}",
            "--dry-run=client",
            "-o",
            "yaml",
        )
        kubectl(kubeconfig, "apply", "-f", "-", stdin=manifest)


def deploy(kubeconfig: Path, overlay: Path, timeout: int = 300) -> Deployed:
    """Secrets, `kubectl apply -k OVERLAY`, and a rollout until every Deployment is Available."""
    token_name, token = "tests", secrets.token_urlsafe(24)
    create_secrets(kubeconfig, token_name, token)
    kubectl(kubeconfig, "apply", "-k", str(overlay))
    for deployment in kubectl(
        kubeconfig, "-n", NAMESPACE, "get", "deployments", "-o", "name"
    ).split():
        kubectl(
            kubeconfig, "-n", NAMESPACE, "rollout", "status", deployment, f"--timeout={timeout}s"
        )
    return Deployed(kubeconfig, token_name, token)


def main(argv: list[str]) -> int:
    """`python -m harness.deploy overlay DIR [BASE]`: the dev cluster's overlay of deploy/BASE.

    BASE is `kind` by default (`make demo`); `make demo-ha` writes `ha`'s.
    """
    if len(argv) not in (2, 3) or argv[0] != "overlay":
        print("usage: python -m harness.deploy overlay DIR [BASE]", file=sys.stderr)
        return 2
    base = REPO / "deploy" / (argv[2] if len(argv) == 3 else "kind")
    print(write_dev_overlay(Path(argv[1]).resolve(), base))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
