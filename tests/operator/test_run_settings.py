"""`egress-proxies run` options: flags and EGRESS_PROXIES_* variables from one declaration."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress_proxies import cli
from egress_proxies.operator import main
from egress_proxies.settings import RunSettings, flag_of, variables_of

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No option variable from the caller's shell leaks into these tests."""
    for name in RunSettings.model_fields:
        for variable in variables_of(RunSettings, name):
            monkeypatch.delenv(variable, raising=False)


def settings_of(monkeypatch: pytest.MonkeyPatch, *flags: str) -> RunSettings:
    """The settings `egress-proxies run` would start the operator with."""
    seen: list[RunSettings] = []

    def capture(settings: RunSettings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(main, "run_operator", capture)
    assert cli.main(["run", *flags]) == 0
    [settings] = seen
    return settings


def test_a_flag_beats_its_variable_which_beats_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert settings_of(monkeypatch).concurrency == 4

    monkeypatch.setenv("EGRESS_PROXIES_CONCURRENCY", "7")
    assert settings_of(monkeypatch).concurrency == 7
    assert settings_of(monkeypatch, "--concurrency", "9").concurrency == 9


def test_the_stack_worker_is_on_by_default_and_zero_idle_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = settings_of(monkeypatch)
    assert (settings.stack_worker_idle, settings.stack_worker_operations) == (30.0, 200)
    monkeypatch.setenv("EGRESS_PROXIES_STACK_WORKER_OPERATIONS", "5")
    settings = settings_of(monkeypatch, "--stack-worker-idle", "0")
    assert (settings.stack_worker_idle, settings.stack_worker_operations) == (0.0, 5)


def test_variables_keep_their_historical_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGRESS_PROXIES_NAMESPACES", "crawl,staging")
    monkeypatch.setenv("EGRESS_PROXIES_GC_INTERVAL_SECONDS", "42")
    monkeypatch.setenv("EGRESS_PROXIES_PEERING_PRIORITY", "3")
    monkeypatch.setenv("EGRESS_PROXIES_STANDALONE", "true")
    monkeypatch.setenv("GOOGLE_PROJECT", "fallback-project")
    monkeypatch.setenv("KUBECONFIG", "/tmp/kubeconfig")

    settings = settings_of(monkeypatch)

    assert settings.namespaces == ["crawl", "staging"]
    assert settings.gc_interval == 42
    assert settings.priority == 3
    assert settings.standalone
    assert settings.gcp_project == "fallback-project"
    assert settings.kubeconfig == Path("/tmp/kubeconfig")

    monkeypatch.setenv("EGRESS_PROXIES_GCP_PROJECT", "own-project")
    assert settings_of(monkeypatch).gcp_project == "own-project"


def test_repeated_namespace_flags_replace_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGRESS_PROXIES_NAMESPACES", "crawl")
    settings = settings_of(monkeypatch, "--namespace", "a", "--namespace", "b")
    assert settings.namespaces == ["a", "b"]


@pytest.mark.parametrize(
    ("flags", "variable", "named"),
    [
        (["--concurrency", "many"], None, "--concurrency / $EGRESS_PROXIES_CONCURRENCY"),
        ([], ("EGRESS_PROXIES_CONCURRENCY", "0"), "--concurrency / $EGRESS_PROXIES_CONCURRENCY"),
        (
            [],
            ("EGRESS_PROXIES_GC_INTERVAL_SECONDS", "soon"),
            "--gc-interval / $EGRESS_PROXIES_GC_INTERVAL_SECONDS",
        ),
        ([], ("EGRESS_PROXIES_STANDALONE", "perhaps"), "--standalone / $EGRESS_PROXIES_STANDALONE"),
        (
            ["--stack-worker-idle", "-1"],
            None,
            "--stack-worker-idle / $EGRESS_PROXIES_STACK_WORKER_IDLE",
        ),
    ],
)
def test_a_bad_value_exits_naming_its_flag_and_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    variable: tuple[str, str] | None,
    named: str,
) -> None:
    started: list[RunSettings] = []
    monkeypatch.setattr(main, "run_operator", started.append)
    if variable is not None:
        monkeypatch.setenv(*variable)

    with pytest.raises(SystemExit) as exited:
        cli.main(["run", *flags])

    assert exited.value.code == 2
    assert named in capsys.readouterr().err
    assert started == []


def test_help_lists_every_field_with_its_flag_and_variables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())

    for name in RunSettings.model_fields:
        assert flag_of(RunSettings, name) in text, name
        for variable in variables_of(RunSettings, name):
            assert f"${variable}" in text, variable


def test_the_console_is_off_until_given_its_users(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert settings_of(monkeypatch).console_tokens_dir is None
    settings = settings_of(monkeypatch, "--console-tokens-dir", str(tmp_path))
    assert (settings.console_tokens_dir, settings.console_port) == (tmp_path, 8091)
    monkeypatch.setenv("EGRESS_PROXIES_CONSOLE_PORT", "9191")
    assert settings_of(monkeypatch).console_port == 9191


@pytest.mark.parametrize("command", [["run"], ["discovery", "--lease-store", "memory"]])
def test_a_console_tokens_dir_that_is_not_there_exits_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    missing = tmp_path / "console-users"
    with pytest.raises(SystemExit) as exited:
        cli.main([*command, "--console-tokens-dir", str(missing)])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--console-tokens-dir" in error and f"{str(missing)!r}: no such directory" in error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1
