"""Every registered method, and its private variant where it has one, passes the conformance suite of
:mod:`tests.conformance.check_method` (issue 44 item 4): its site guard and reply limits, its ledger
against its plan, the refusal of undeclared message kinds at both ends, the same graph over every
transport, its audit cases, help line and docs entries.

The graphs over gRPC on loopback (the sites in threads, :func:`tests.net.conftest.networked`; skipped
without the ``net`` extra) take at most about 5 s per variant, so they run in the fast selection too.
"""

from __future__ import annotations

import pytest

from bnsl_cli.federated.methods.registry import METHODS, method_spec
from tests.conformance.check_method import (
    RUN_CHECKS,
    can_run_networked,
    check_method,
    check_transports_agree,
    variants,
)

VARIANTS = variants()


def _id(variant) -> str:
    method, private = variant
    return f"{method}-dp" if private else method


def test_every_registered_method_is_checked():
    assert {m for m, _ in VARIANTS} == set(METHODS)
    assert {m for m, p in VARIANTS if p} == {m for m in METHODS if method_spec(m).private}


def test_check_method_in_one_call():
    """``check_method`` itself, as a new method's own test would call it (non-private, no gRPC)."""
    check_method(method_spec("fed-bnsl"), private=False, transports=("in-process", "processes"))


@pytest.mark.parametrize("check", RUN_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
def test_method_conforms(variant, check):
    method, private = variant
    check(method_spec(method), private)


@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
def test_the_same_graph_in_process_and_in_worker_processes(variant):
    method, private = variant
    graphs = check_transports_agree(method_spec(method), private, ("in-process", "processes"))
    assert set(graphs) == {"in-process", "processes"}


# real gRPC on loopback, three sites in threads: at most about 5 s per variant (measured), so not `slow`
@pytest.mark.parametrize("variant", [v for v in VARIANTS if can_run_networked(method_spec(v[0]))], ids=_id)
def test_the_same_graph_over_grpc_on_loopback(variant):
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    method, private = variant
    graphs = check_transports_agree(method_spec(method), private, ("in-process", "grpc"))
    assert set(graphs) == {"in-process", "grpc"}
