"""A shard's name, what it owns, the names it writes, and its claim on a state dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress_proxies.cli import main
from egress_proxies.kube.selectors import parse_selector
from egress_proxies.operator.shard import ShardError, bind_state_dir, shard_from_flags
from egress_proxies.proxies.sharding import (
    Claim,
    Release,
    Shard,
    claim,
    finalizers_to_keep,
    release,
    selects,
)
from egress_proxies.vocabulary import FINALIZER, OWNER_ANNOTATION, SHARD_LABEL

pytestmark = pytest.mark.unit


def test_no_shard_flags_mean_one_operator_owns_everything() -> None:
    assert shard_from_flags(None, None, ["crawl"]) is None


def test_a_one_label_selector_names_the_shard() -> None:
    shard = shard_from_flags(None, "shard=a", [])
    assert shard is not None
    assert shard.name == "a"
    assert shard.owns({"shard": "a"}) and not shard.owns({"shard": "b"}) and not shard.owns({})
    assert shard.finalizer == f"{FINALIZER}-a"
    assert shard.peering("egress-proxies") == "egress-proxies-a"
    assert shard.labels == {SHARD_LABEL: "a"}
    assert repr(shard) == "<Shard a [selector: shard=a]>"


def test_other_selectors_get_a_stable_digest_name_and_an_explicit_name_wins() -> None:
    first = shard_from_flags(None, "team in (x,y)", [])
    again = shard_from_flags(None, "team in (y, x)", [])
    assert first is not None and again is not None
    assert first.name == again.name and first.name.startswith("s-")
    named = shard_from_flags("east", "team in (x,y)", [])
    assert named is not None and named.name == "east"


def test_a_namespace_shard_without_a_selector_is_named_after_its_namespace() -> None:
    shard = shard_from_flags(None, "", ["crawl-eu"])
    assert shard is not None and shard.name == "crawl-eu" and shard.owns({"any": "thing"})


@pytest.mark.parametrize(
    ("name", "selector", "flag"),
    [
        (None, "shard=a,", "--shard-selector"),
        ("Upper", "shard=a", "--shard-name"),
        ("x" * 41, None, "--shard-name"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(
    name: str | None, selector: str | None, flag: str
) -> None:
    with pytest.raises(ShardError, match=flag):
        shard_from_flags(name, selector, [])


def test_the_command_refuses_a_bad_selector_before_starting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["run", "--state-dir", str(tmp_path), "--shard-selector", "shard in (a"])
    assert code == 2
    assert "--shard-selector 'shard in (a': unbalanced '('" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_state_dir_belongs_to_one_shard(tmp_path: Path) -> None:
    a, b = Shard("a", parse_selector("shard=a")), Shard("b", parse_selector("shard=b"))
    bind_state_dir(tmp_path, a)
    bind_state_dir(tmp_path, a)
    with pytest.raises(ShardError, match="belongs to shard 'a'; shard 'b' needs its own"):
        bind_state_dir(tmp_path, b)
    with pytest.raises(ShardError, match="belongs to shard 'a'; an unsharded operator"):
        bind_state_dir(tmp_path, None)


def test_an_unsharded_state_dir_can_become_a_shards_but_not_the_reverse(tmp_path: Path) -> None:
    bind_state_dir(tmp_path, None)
    assert list(tmp_path.iterdir()) == []
    a = shard_from_flags(None, "shard=a", [])
    bind_state_dir(tmp_path, a)
    assert (tmp_path / "shard").read_text() == "a\n"


SHARD_A = Shard("a", parse_selector("shard=a"))


def test_an_unsharded_operator_selects_every_proxy_and_a_shard_its_own() -> None:
    assert selects(None, {}) and selects(None, {"shard": "b"})
    assert selects(SHARD_A, {"shard": "a"}) and not selects(SHARD_A, {"shard": "b"})


def test_a_released_proxy_keeps_its_stack_until_another_shard_owns_it() -> None:
    unclaimed = release(SHARD_A, {}, handled=True, has_stack=True)
    assert unclaimed == Release(stop_handling=True, forget_stack_for=None)
    still_ours = release(SHARD_A, {OWNER_ANNOTATION: "a"}, handled=True, has_stack=True)
    assert still_ours.forget_stack_for is None


def test_a_proxy_another_shard_owns_has_its_stack_here_forgotten() -> None:
    taken = release(SHARD_A, {OWNER_ANNOTATION: "b"}, handled=True, has_stack=True)
    assert taken == Release(stop_handling=True, forget_stack_for="b")
    nothing_here = release(SHARD_A, {OWNER_ANNOTATION: "b"}, handled=False, has_stack=False)
    assert nothing_here == Release(stop_handling=False, forget_stack_for=None)


def test_a_shard_claims_a_proxy_once_its_own_stack_holds_the_instance() -> None:
    pending = claim(SHARD_A, {})
    assert pending == Claim("a")
    assert pending.annotations(stack_holds_instance=False) == {}
    assert pending.annotations(stack_holds_instance=True) == {OWNER_ANNOTATION: "a"}
    taken_from_b = claim(SHARD_A, {OWNER_ANNOTATION: "b"})
    assert taken_from_b is not None
    assert taken_from_b.annotations(stack_holds_instance=True) == {OWNER_ANNOTATION: "a"}


def test_nothing_to_claim_when_unsharded_or_claimed_already() -> None:
    assert claim(None, {}) is None
    assert claim(SHARD_A, {OWNER_ANNOTATION: "a"}) is None


def test_the_unsharded_finalizer_goes_only_beside_the_shards_own() -> None:
    both = ["other", FINALIZER, SHARD_A.finalizer]
    assert finalizers_to_keep(SHARD_A, both) == ["other", SHARD_A.finalizer]
    assert finalizers_to_keep(SHARD_A, [FINALIZER]) is None
    assert finalizers_to_keep(SHARD_A, [SHARD_A.finalizer]) is None
    assert finalizers_to_keep(None, both) is None
