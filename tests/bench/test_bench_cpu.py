"""The CPU meter (harness/benchkit/cpu.py): dead processes in their tree, pulumi in its group."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.benchkit.cpu import CLI, OPERATOR, PLUGIN, WORKER, CpuMeter, pulumi_groups

pytestmark = pytest.mark.integration

BURN = """\
import sys, time
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    pass
"""


def test_a_window_splits_an_operator_tree_by_kind_dead_processes_included(tmp_path: Path) -> None:
    burn, done = tmp_path / "burn.py", tmp_path / "done"
    burn.write_text(BURN)
    with pulumi_groups("test") as groups:
        # The operator's stand-in idles while its worker burns 0.3 s and then runs
        # a "pulumi" that joins the CLI group and burns 0.4 s. Both have exited,
        # waited for by their parents, before the window closes.
        pulumi = f"echo $$ > {groups.cli.procs}; exec {sys.executable} {burn} 0.4"
        worker = (
            f"import subprocess; exec(open({str(burn)!r}).read().replace('float(sys.argv[1])', "
            f"'0.3')); subprocess.run(['sh', '-c', {pulumi!r}], check=True)"
        )
        operator_code = (
            "import pathlib, subprocess, sys, time\n"
            "time.sleep(0.5)\n"
            f"subprocess.run([sys.executable, '-c', {worker!r}], check=True)\n"
            f"pathlib.Path({str(done)!r}).write_text('')\n"
            "time.sleep(60)\n"
        )
        operator = subprocess.Popen([sys.executable, "-c", operator_code])
        try:
            time.sleep(0.2)  # started, not working yet
            meter = CpuMeter(1, groups, operator.pid)
            before = meter.read()
            while not done.exists():
                time.sleep(0.05)
            window = meter.read().since(before)
        finally:
            operator.kill()
            operator.wait()
    assert 0.35 <= window.seconds[CLI] <= 0.6, window
    assert 0.25 <= window.seconds[WORKER] <= 0.6, window  # the burn, and an interpreter's start
    assert window.seconds[OPERATOR] < 0.15, window
    assert window.seconds[PLUGIN] == 0.0, window
