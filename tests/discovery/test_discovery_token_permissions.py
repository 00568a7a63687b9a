"""A token file the discovery process may not read: one log line naming it, no traceback.

Found on the dev cluster's node: the tier's pod ran as uid 65532 without an
fsGroup, the Secret's files were root:root 0440, and the server died at start
with a PermissionError traceback. Here the file belongs to another user and
the child process runs without the capabilities that let root read any file
(`setpriv` drops them from its bounding set).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

OTHER_USER = 12345

PROGRAM = """
import logging, sys
from pathlib import Path
from egress_proxies.discovery.token_files import TokenDirectory
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
print("tokens:", len(TokenDirectory(Path(sys.argv[1]))()))
"""


def test_an_unreadable_token_file_is_logged_by_name_and_loads_nothing(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "crawler").write_text("c" * 24)
    (tokens / "crawler").chmod(0o440)
    os.chown(tokens / "crawler", OTHER_USER, OTHER_USER)
    result = subprocess.run(
        [
            shutil.which("setpriv") or "/usr/bin/setpriv",
            "--bounding-set=-dac_override,-dac_read_search",
            sys.executable,
            "-c",
            PROGRAM,
            str(tokens),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
        timeout=60,
    )
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "cannot read token file 'crawler' (Permission denied)" in result.stdout
    assert "tokens: 0" in result.stdout
