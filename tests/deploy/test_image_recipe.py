"""deploy/Dockerfile says what deploy/image.env says: the two operator-image recipes agree.

tools/images.sh builds the dev cluster's image from deploy/image.env (and
tests/deploy/test_operator_image.py checks the result against it); the
Dockerfile cannot read ENV, USER, EXPOSE, ENTRYPOINT or COPY lines from a
file, so this test holds each of them to the shared list. Docker cannot run
here: the Dockerfile is read, not built.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

import pytest

from tests.operator_image import ROOT, image_env, image_spec

pytestmark = pytest.mark.unit

DEPLOY = ROOT / "deploy"
# The one pip command both recipes install the venv with.
PIP_INSTALL = "pip install -c constraints.txt . ./clients/python"


@dataclass
class Stage:
    """One FROM ... of the Dockerfile and its instructions, continuation lines joined."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for word, args in self.instructions if word == keyword]

    def one(self, keyword: str) -> str:
        found = self.all(keyword)
        assert len(found) == 1, f"{keyword} appears {len(found)} times in stage {self.name}"
        return found[0]


def stages() -> list[Stage]:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found: list[Stage] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, args = line.strip().partition(" ")
        if keyword == "FROM":
            base, _, name = args.partition(" AS ")
            found.append(Stage(base.strip(), name.strip() or None))
        elif found:
            found[-1].instructions.append((keyword, args.strip()))
    return found


def stage(name: str) -> Stage:
    return next(s for s in stages() if s.name == name)


def final() -> Stage:
    return stages()[-1]


def env_words(value: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in shlex.split(value))


def copies(s: Stage) -> list[tuple[str, str]]:
    """(source, destination) for each source of each COPY, `--from=` dropped."""
    pairs: list[tuple[str, str]] = []
    for args in s.all("COPY"):
        *sources, destination = [w for w in args.split() if not w.startswith("--")]
        pairs.extend((source, destination) for source in sources)
    return pairs


def test_the_image_is_built_on_the_base_that_installs_the_listed_packages() -> None:
    base = stage("base")
    assert final().base == "base"
    assert stage("package").base == "base"
    assert ("deploy/image.env", "/tmp/image.env") in copies(base)
    (install,) = base.all("RUN")
    assert ". /tmp/image.env" in install
    assert "apt-get install -y --no-install-recommends ${IMAGE_PACKAGES}" in install


def test_the_venv_holds_the_listed_sources_installed_by_the_same_pip_command() -> None:
    spec = image_spec()
    package = stage("package")
    copied = {source for source, _ in copies(package)}
    assert copied == set(spec["IMAGE_SOURCES"].split())
    assert package.all("RUN")[-1] == f"{spec['IMAGE_VENV']}/bin/{PIP_INSTALL}"
    hook = (ROOT / "tools" / "images" / "operator-rootfs.sh").read_text()
    assert f'"$IMAGE_VENV/bin/pip" {PIP_INSTALL.removeprefix("pip ")}' in hook


def test_the_final_stage_copies_the_venv_the_cli_and_each_plugin_to_the_listed_paths() -> None:
    spec = image_spec()
    plugins = spec["IMAGE_PLUGINS"].split()
    destinations = [destination for _, destination in copies(final())]
    assert final().all("RUN") == [], "the final stage only copies"
    assert destinations == [
        spec["IMAGE_VENV"],
        f"{spec['IMAGE_PULUMI_ROOT']}/bin/pulumi",
        *(f"{spec['IMAGE_PLUGINS_DIR']}/{p}/pulumi-resource-{p}" for p in plugins),
    ]


@pytest.mark.parametrize("keyword", ["ENV", "USER", "EXPOSE", "ENTRYPOINT", "CMD"])
def test_the_final_stage_runs_as_listed(keyword: str) -> None:
    spec = image_spec()
    value = final().one(keyword)
    match keyword:
        case "ENV":
            assert env_words(value) == image_env(spec)
        case "USER":
            assert value == spec["IMAGE_USER"]
        case "EXPOSE":
            assert value.split() == spec["IMAGE_PORTS"].split()
        case "ENTRYPOINT":
            assert json.loads(value) == spec["IMAGE_ENTRYPOINT"].split()
        case "CMD":
            assert json.loads(value) == spec["IMAGE_CMD"].split()


def test_path_puts_the_venv_the_cli_and_every_plugin_first() -> None:
    spec = image_spec()
    path = image_env(spec)["PATH"].split(":")
    plugins = spec["IMAGE_PLUGINS"].split()
    assert path[: 2 + len(plugins)] == [
        f"{spec['IMAGE_VENV']}/bin",
        f"{spec['IMAGE_PULUMI_ROOT']}/bin",
        *(f"{spec['IMAGE_PLUGINS_DIR']}/{p}" for p in plugins),
    ]
    assert image_env(spec)["EGRESS_PROXIES_PULUMI_ROOT"] == spec["IMAGE_PULUMI_ROOT"]


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    allowed = {
        line.removeprefix("!").rstrip("/")
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert allowed == {*image_spec()["IMAGE_SOURCES"].split(), "deploy/image.env"}
