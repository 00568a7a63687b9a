"""What `egress-proxies dev-cluster up|down` can be told (flags only: no variables)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from egress_proxies.settings.options import REQUIRED, option


class DevClusterDownSettings(BaseModel):
    """Which dev cluster to stop."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    title: ClassVar[str] = "dev cluster"

    state_dir: Path = option(REQUIRED, "where keys, data and logs live")


class DevClusterUpSettings(DevClusterDownSettings):
    """Where the dev cluster keeps its state, whether it detaches, which CRDs it installs."""

    detach: bool = option(False, "return once ready; keep it running")
    crds: Path | None = option(
        None, "a directory of CRD YAML files to install; unset: the project's crds/"
    )
