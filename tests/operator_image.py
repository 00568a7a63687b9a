"""deploy/image.env, the list of what goes into the operator image, as the tests read it."""

from __future__ import annotations

import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE_SPEC = ROOT / "deploy" / "image.env"


def image_spec() -> dict[str, str]:
    """deploy/image.env's KEY=value lines, unquoted as the shell would."""
    spec = {}
    for line in IMAGE_SPEC.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = shlex.split(line)[0].partition("=")
            spec[key] = value
    return spec


def image_env(spec: dict[str, str]) -> dict[str, str]:
    """IMAGE_ENV's NAME=value words as a mapping."""
    return dict(word.split("=", 1) for word in shlex.split(spec["IMAGE_ENV"]))
