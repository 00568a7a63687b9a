"""What the host's /proc and cgroup files say about the dev cluster's processes."""

from __future__ import annotations

from pathlib import Path


def read_proc(path: Path) -> str:
    """A /proc or cgroup file's text, or "" once the process is gone."""
    try:
        return path.read_text()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    """A process's command line, space-separated."""
    return read_proc(Path(f"/proc/{pid}/cmdline")).replace("\0", " ")


def all_pids() -> list[int]:
    """Every process on the host."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def any_alive(pids: set[int]) -> bool:
    """Whether any of these processes still exists."""
    return any(Path(f"/proc/{pid}").exists() for pid in pids)


def cgroup_pids(cgroups: list[Path]) -> set[int]:
    """The processes in these cgroup directories and below them."""
    pids: set[int] = set()
    for directory in cgroups:
        if directory.exists():
            for procs in directory.rglob("cgroup.procs"):
                pids.update(int(pid) for pid in read_proc(procs).split())
    return pids


def ancestor_named(pid: int, name: str) -> int | None:
    """The nearest ancestor of `pid` whose executable is called `name`."""
    while pid > 1:
        stat = read_proc(Path(f"/proc/{pid}/stat"))
        if not stat:
            return None
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if Path(cmdline(pid).split(" ")[0]).name == name:
            return pid
    return None
