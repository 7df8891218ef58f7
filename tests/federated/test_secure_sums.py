"""Sum-shaped pooling: which message bytes are summed, fed-bnsl's coordinator from Σ_p B_p alone,
and the fleet's unmasking that hands the coordinator sums only."""

import numpy as np
import pytest

from bnsl_cli.federated.methods.admm.coordinator import Coordinator, PenaltySchedule
from bnsl_cli.federated.messages import (
    HEADER, CentreBroadcast, DenseUpdate, GramReply, ShareReply, SparseEntries, SparseUpdate,
)
from bnsl_cli.federated.secure_sum import ALL_SITES, summable_span

D, P = 5, 3


def test_summable_span_names_the_values_of_each_summable_kind():
    B = np.arange(D * D, dtype=float).reshape(D, D)
    with_obj = DenseUpdate(1, 0, D, B, 2.5).encode()
    assert summable_span(with_obj) == (HEADER.size + 1, D * D + 1)  # the objective is summed too
    without = DenseUpdate(1, 0, D, B, None).encode()
    assert summable_span(without) == (HEADER.size + 1, D * D)
    start, n = summable_span(without)
    assert np.array_equal(np.frombuffer(without, "<f8", offset=start), B.ravel())
    assert summable_span(GramReply(3, 1, D, np.ones(4)).encode()) == (HEADER.size, 4)
    assert summable_span(ShareReply(0, 1, D, np.ones(D)).encode()) == (HEADER.size, D)
    # not summable: the sparse update (its support is the message), broadcasts, nothing
    assert summable_span(SparseUpdate(1, 0, D, SparseEntries.from_dense(B)).encode()) is None
    assert summable_span(CentreBroadcast(1, D, np.zeros(D)).encode()) is None
    assert summable_span(None) is None


def _coord():
    return Coordinator(D, P, PenaltySchedule(1e-2, 1e-2, 1.75, 1.25, 1e16), l1=0.05, dense=True)


def _summed(rnd, Bs, objs):
    """What the networked fleet hands over under secure sums: the sum, then zeros, sender ALL_SITES."""
    total = DenseUpdate(rnd, ALL_SITES, D, np.sum(Bs, axis=0), float(sum(objs))).encode()
    zero = DenseUpdate(rnd, ALL_SITES, D, np.zeros((D, D)), 0.0).encode()
    return [total] + [zero] * (len(Bs) - 1)


def test_fed_bnsl_coordinator_from_the_sum_alone():
    """Fed with Σ_p B_p (and zeros) the coordinator takes the same W-steps and mirrors the same Σ β_p
    as with every B_p: the W-step depends on the sum only."""
    rng = np.random.default_rng(0)
    a, b = _coord(), _coord()
    for rnd in range(1, 6):
        Bs = [np.where(rng.random((D, D)) < 0.4, rng.normal(size=(D, D)), 0.0) for _ in range(P)]
        for B in Bs:
            np.fill_diagonal(B, 0.0)
        objs = list(rng.random(P))
        for p, B in enumerate(Bs):
            a.receive(DenseUpdate(rnd, p, D, B, objs[p]).encode())
        for msg in _summed(rnd, Bs, objs):
            b.receive(msg)
        ia, ib = a.step(), b.step()
        np.testing.assert_allclose(b.W, a.W, atol=1e-9)
        np.testing.assert_allclose(b.beta.sum(axis=0), a.beta.sum(axis=0), atol=1e-9)
        assert ib["objective"] == pytest.approx(ia["objective"], rel=1e-12)
        # the gap under sums is the mean's, a lower bound of max_p |B_p − W|
        mean_gap = float(np.max(np.abs(np.mean(Bs, axis=0) - b.W)))
        assert ib["gap"] == pytest.approx(mean_gap, abs=1e-12) and ib["gap"] <= ia["gap"] + 1e-12
    assert np.any(a.W != 0)


def test_unmask_hands_over_sums_only_and_refuses_mismatched_shapes():
    pytest.importorskip("cryptography")
    from bnsl_cli.net.fleet import unmask_replies
    from bnsl_cli.federated.secure_sum import SecureSum, generate_keypair

    keys = [generate_keypair() for _ in range(P)]
    pubs = [pk for _, pk in keys]
    sites = [SecureSum(i, sk, pubs, b"run") for i, (sk, _) in enumerate(keys)]
    Bs = [np.full((D, D), k + 0.25) for k in range(P)]
    masked = []
    for k, (s, B) in enumerate(zip(sites, Bs)):
        raw = DenseUpdate(4, k, D, B, None).encode()
        start, _ = summable_span(raw)
        y = s.mask(np.frombuffer(raw, "<f8", offset=start), b"kind3/round4")
        masked.append(raw[:start] + y.astype("<u8").tobytes())
    out = unmask_replies(masked)
    got = [DenseUpdate.decode(r) for r in out]
    assert all(g.sender == ALL_SITES and g.round == 4 for g in got)
    np.testing.assert_allclose(got[0].B, np.sum(Bs, axis=0), atol=P * 2.0 ** -33)
    assert not np.any(got[1].B) and not np.any(got[2].B)
    # a site whose reply has another shape (here: an objective the others lack) is refused
    odd = DenseUpdate(4, 2, D, Bs[2], 1.0).encode()
    with pytest.raises(ValueError, match="different shapes"):
        unmask_replies(masked[:2] + [odd[:len(masked[0])]])


def test_statistics_site_answers_each_exchange_once_in_order():
    from bnsl_cli.federated.messages import StatsRequest
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.plan.options import LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes
    from tests._sim import simulated_tables

    _, tables = simulated_tables(D, 2, 200, 1)
    plan = RunPlan.resolve(LearnConfig(method="fed-bnsl"), Shapes.of_tables(tables))
    site = make_participant(plan, 0, tables[0].X)
    centre = CentreBroadcast(1, D, np.zeros(D)).encode()
    with pytest.raises(ValueError, match="out of order"):
        site.handle(centre)  # before the means
    mean = ShareReply.decode(site.handle(StatsRequest(0, D).encode())).values
    np.testing.assert_allclose(mean, tables[0].X.sum(axis=0) / plan.n_total, rtol=1e-12)
    var = ShareReply.decode(site.handle(centre)).values
    np.testing.assert_allclose(var, (tables[0].X ** 2).sum(axis=0) / plan.n_total, rtol=1e-10)  # about 0
    with pytest.raises(ValueError, match="out of order"):
        site.handle(centre)  # twice
