"""Which Kubernetes API server a process talks to."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from egress_proxies.settings.options import Options, option


class ClusterSettings(Options):
    """The kubeconfig, as kubectl finds it; without one, the pod's service account."""

    title: ClassVar[str] = "cluster"

    kubeconfig: Path | None = option(
        None, "kubeconfig file; unset: the in-cluster service account", env=("KUBECONFIG",)
    )
