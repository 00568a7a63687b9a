"""Discovery tokens from a mounted Secret directory: loaded, rotated, and kept when broken."""

from __future__ import annotations

from pathlib import Path

from egress_proxies.discovery.token_files import TokenDirectory

TOKEN_A = "a" * 20
TOKEN_B = "b" * 20


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_tokens_are_read_and_rotation_applies_after_a_second(tmp_path: Path) -> None:
    clock = Clock()
    (tmp_path / "old").write_text(TOKEN_A + "\n")
    (tmp_path / "..data").mkdir()  # kubelet bookkeeping is ignored
    tokens = TokenDirectory(tmp_path, clock)
    assert tokens() == frozenset({TOKEN_A})
    (tmp_path / "new").write_text(TOKEN_B)
    assert tokens() == frozenset({TOKEN_A}), "re-checked at most once per second"
    clock.now = 1.5
    assert tokens() == frozenset({TOKEN_A, TOKEN_B})
    (tmp_path / "old").unlink()
    clock.now = 3.0
    assert tokens() == frozenset({TOKEN_B})


def test_a_broken_file_keeps_the_last_good_tokens(tmp_path: Path) -> None:
    clock = Clock()
    (tmp_path / "good").write_text(TOKEN_A)
    tokens = TokenDirectory(tmp_path, clock)
    assert tokens() == frozenset({TOKEN_A})
    (tmp_path / "short").write_text("tiny")
    clock.now = 2.0
    assert tokens() == frozenset({TOKEN_A})


def test_an_empty_directory_has_no_tokens(tmp_path: Path) -> None:
    assert TokenDirectory(tmp_path, Clock())() == frozenset()
