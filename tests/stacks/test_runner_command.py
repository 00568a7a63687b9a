"""One PulumiCommand, and so one `pulumi version`, per process, even when the first ops race."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from egress_proxies import toolchain
from egress_proxies.stacks.operations import StackOperations
from egress_proxies.stacks.settings import RunnerSettings

pytestmark = pytest.mark.integration


def test_threads_asking_at_once_share_one_command(tmp_path: Path) -> None:
    calls = tmp_path / "calls.log"
    (tmp_path / "root" / "bin").mkdir(parents=True)
    wrapper = tmp_path / "root" / "bin" / "pulumi"
    # A slow `version` widens the window in which the threads race.
    wrapper.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\nsleep 0.3\nexec {toolchain.find("pulumi")} "$@"\n'
    )
    wrapper.chmod(0o755)
    operations = StackOperations(
        RunnerSettings(
            state_dir=tmp_path / "state",
            passphrase="test",
            concurrency=4,
            pulumi_root=tmp_path / "root",
        )
    )
    with ThreadPoolExecutor(4) as pool:
        commands = list(pool.map(lambda _: operations._pulumi(), range(4)))
    assert len({id(command) for command in commands}) == 1
    assert calls.read_text().split() == ["version"]
