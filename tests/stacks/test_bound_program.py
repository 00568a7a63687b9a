"""A bound program is a value: it pickles to the stack worker whole, and shows no secret."""

from __future__ import annotations

import pickle

import pytest

from egress_proxies.model import ProxySpec
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.outputs import BoundProgram, bind
from egress_proxies.stacks.programs import deferred

pytestmark = pytest.mark.unit


def inputs() -> ProgramInputs:
    return ProgramInputs(
        namespace="crawl",
        name="squid-1",
        uid="0b6c1f0e-1111-4222-8333-444455556666",
        instance_name="egress-0b6c1f0e",
        spec=ProxySpec.model_validate({"provider": "kubernetes", "kubernetes": {}}),
        credentials=ProxyCredentials("crawler", "s3cret-password"),
        shard="a",
    )


def test_a_bound_program_survives_pickling_as_it_was() -> None:
    program = bind(deferred.squid_pod_program, inputs(), spec_hash="abc", provider="kubernetes")
    copy = pickle.loads(pickle.dumps(program))  # noqa: S301 (our own bytes)
    assert isinstance(copy, BoundProgram)
    assert copy == program
    assert copy.program is deferred.squid_pod_program  # by reference: imported where it runs
    assert copy.inputs.credentials.password == "s3cret-password"


def test_its_repr_names_the_proxy_and_hides_the_password() -> None:
    text = repr(bind(deferred.gce_vm_program, inputs(), spec_hash="abc", provider="gcp"))
    assert "crawl/squid-1" in text
    assert "s3cret-password" not in text
