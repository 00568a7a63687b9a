"""Generate the client's synchronous face, `_sync/pool.py`, from `_async/pool.py`.

    python clients/python/scripts/generate_sync.py          # write it
    python clients/python/scripts/generate_sync.py --check  # exit 1 if it is stale

The unasync library (as urllib3 and httpcore use it) drops `async`/`await` and
maps names token by token; ruff then formats the result, so the checked-in
file is exactly what this prints. The test suite runs `--check`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

PACKAGE = Path(__file__).resolve().parents[1] / "egress_proxies_client"
SOURCE = PACKAGE / "_async" / "pool.py"
TARGET = PACKAGE / "_sync" / "pool.py"

REPLACEMENTS = {
    "AsyncPool": "Pool",
    "AsyncLease": "Lease",
    "AsyncClient": "Client",
    "aclose": "close",
    "TaskReporter": "ThreadReporter",
    "AsyncSleep": "Sleep",
    "ASYNC_SLEEP": "SLEEP",
    "AsyncLock": "Lock",
}

DOCSTRING = (
    '"""Pool and Lease, the synchronous face: generated from `_async/pool.py` by\n'
    "`clients/python/scripts/generate_sync.py`. Do not edit: edit the source and run it.\n"
    '"""'
)


def generate() -> str:
    """The synchronous face as it must be checked in."""
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "_async" / "pool.py"
        source.parent.mkdir()
        source.write_text(SOURCE.read_text())
        rule = unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)
        unasync.unasync_files([str(source)], [rule])
        text = (Path(scratch) / "_sync" / "pool.py").read_text()
    _, _, body = text.split('"""', 2)
    # Renamed imports sort differently: ruff sorts them, then formats.
    sorted_imports = _ruff("check", "--fix", "--select", "I", DOCSTRING + body)
    return _ruff("format", sorted_imports)


def _ruff(command: str, *args: str) -> str:
    *flags, text = args
    ruff = [sys.executable, "-m", "ruff", command, *flags, "--stdin-filename", str(TARGET), "-"]
    return subprocess.run(ruff, input=text, capture_output=True, text=True, check=True).stdout


def main() -> int:
    """Write the synchronous face, or with --check say whether it is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    check = parser.parse_args().check
    text = generate()
    if check:
        if TARGET.read_text() != text:
            print(f"{TARGET} is stale: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
