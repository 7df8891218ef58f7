"""--method fed-moments: exact equality with pooled NOTEARS, the messages, the DP release in the ledger."""

import math
import warnings

import numpy as np
import pytest

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.messages import HEADER, CentreBroadcast, MomentRequest, ShareReply
from bnsl_cli.federated.methods.moments.site import MomentSite
from bnsl_cli.stats import (
    from_upper_triangle,
    mean_share,
    pooled_moments_of_blocks,
    scatter_share,
    sum_shares,
    upper_triangle,
)
from bnsl_cli.io.table import Table
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.learn import learn
from tests._sim import simulated_tables


@pytest.fixture(scope="module")
def shards():
    return simulated_tables(8, 4, 400, 3)


def _quiet(tables, cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return learn(tables, cfg)


@pytest.mark.parametrize("standardize", [False, True])
def test_fed_moments_is_exactly_pooled_notears(shards, standardize):
    _, tables = shards
    a = _quiet(tables, LearnConfig(method="notears", standardize=standardize))
    b = _quiet(tables, LearnConfig(method="fed-moments", standardize=standardize))
    assert (a.W != 0).sum() > 0
    # bit-for-bit: the same pooled matrix (same blocks, same arithmetic), the same solver
    assert np.array_equal(a.W_raw, b.W_raw)
    assert np.array_equal(a.W, b.W)


def test_exact_equality_with_uneven_shards_and_worker_processes():
    rng = np.random.default_rng(5)
    sim, tables = simulated_tables(6, 3, 300, 11)
    # uneven shards with shifted columns
    X = np.vstack([t.X for t in tables]) + rng.normal(0, 50, size=6)
    cuts = [0, 111, 500, 900]
    uneven = [Table(X[cuts[k]:cuts[k + 1]], tables[0].names, f"p{k}") for k in range(3)]
    a = _quiet(uneven, LearnConfig(method="notears"))
    b = _quiet(uneven, LearnConfig(method="fed-moments", workers=2))
    assert np.array_equal(a.W_raw, b.W_raw)


def test_pooled_moments_equal_the_pooled_covariance():
    rng = np.random.default_rng(0)
    blocks = [rng.normal(m, s, size=(n, 5)) for m, s, n in ((1e6, 1.0, 50), (-3.0, 2.0, 70), (1e6 + 5, 0.5, 31))]
    X = np.vstack(blocks)
    S = pooled_moments_of_blocks(X, [50, 70, 31])
    np.testing.assert_allclose(S, np.cov(X.T, bias=True), rtol=1e-9, atol=1e-6)
    # the sum-shaped encoding: shares of the mean, then shares of the moments about the pooled mean
    n = X.shape[0]
    mu = sum_shares(mean_share(B, n) for B in blocks)
    np.testing.assert_allclose(mu, X.mean(axis=0), rtol=1e-12)
    S2 = from_upper_triangle(sum_shares(scatter_share(B, mu, n) for B in blocks), 5)
    assert np.array_equal(S, S2)
    M = pooled_moments_of_blocks(blocks[0], [len(blocks[0])]) * len(blocks[0])
    assert np.array_equal(from_upper_triangle(upper_triangle(M), 5), M)


def test_messages_round_trip_and_sizes():
    rng = np.random.default_rng(1)
    d = 7
    req = MomentRequest(0, d)
    assert len(req.encode()) == HEADER.size and MomentRequest.decode(req.encode()) == req
    up = rng.normal(size=d * (d + 1) // 2)
    rep = ShareReply(1, 3, d, up)
    data = rep.encode()
    assert len(data) == HEADER.size + 8 * d * (d + 1) // 2
    back = ShareReply.decode(data)
    assert back.sender == 3 and back.round == 1 and np.array_equal(back.values, up)
    with pytest.raises(ValueError):
        MomentRequest.decode(data)
    with pytest.raises(ValueError):
        ShareReply.decode(data[:-1])
    mu = rng.normal(size=d)
    cb = CentreBroadcast.decode(CentreBroadcast(1, d, mu, full=True).encode())
    assert cb.full and np.array_equal(cb.mean, mu) and len(CentreBroadcast(1, d, mu).encode()) == HEADER.size + 8 * d


def test_communication_is_two_sum_shaped_exchanges(shards):
    _, tables = shards
    d, P = 8, 4
    r = _quiet(tables, LearnConfig(method="fed-moments"))
    c = r.report["communication"]
    assert c["exchanges"] == 2
    assert c["bytes_up"] == P * (2 * HEADER.size + 8 * d + 8 * d * (d + 1) // 2)
    assert c["bytes_down"] == P * (2 * HEADER.size + 8 * d)
    assert c["bytes_total"] == c["bytes_up"] + c["bytes_down"]


def test_dp_fed_moments_ledger(shards):
    _, tables = shards
    eps = 4.0
    r = _quiet(tables, LearnConfig(method="fed-moments", dp=DPConfig(epsilon=eps), seed=7))
    pv = r.report["privacy"]
    assert r.report["method"] == "fed-moments" and r.report["method_label"] == "fed-moments (dp)"
    assert math.isclose(pv["epsilon"], eps, rel_tol=1e-9) and pv["epsilon"] <= eps * (1 + 1e-12)
    plan = pv["plan"]
    mult = plan["sigma_multiplier"]
    planned = {rel["release"]: rel for rel in plan["releases"]}
    assert set(planned) == {
        "value-range (raw)", "column-means", "value-range (centred)", "second-moments", "moment-matrix"
    }
    assert planned["moment-matrix"]["noise_multiplier"] == mult
    d = 8
    clip = 1.5
    for part in pv["participants"]:
        kinds = [ev["release"] for ev in part["events"]]
        assert sorted(kinds) == sorted(planned)
        mm = next(ev for ev in part["events"] if ev["release"] == ReleaseKind.MOMENT_MATRIX.value)
        # rows scaled by the released spreads, clipped to c·√d: sensitivity √2·(c√d)²
        assert math.isclose(mm["sensitivity"], math.sqrt(2.0) * clip**2 * d, rel_tol=1e-12)
        assert math.isclose(mm["noise_scale"], mult * mm["sensitivity"], rel_tol=1e-12)
        assert math.isclose(mm["rho_each"], 0.5 / mult**2, rel_tol=1e-12)
        assert mm["count"] == 1
        assert math.isclose(sum(ev["rho"] for ev in part["events"]), plan["rho_planned"], rel_tol=1e-9)
    assert "moment matrix" in pv["mechanism"]


def test_dp_site_sends_its_moments_once_and_needs_a_noise_source(shards):
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes

    _, tables = shards
    plan = RunPlan.resolve(LearnConfig(method="fed-moments", dp=DPConfig(epsilon=8)), Shapes.of_tables(tables))
    with pytest.raises(PrivacyBudgetError):
        MomentSite(0, tables[0].X, privacy=plan.privacy, rng=None)
    site = MomentSite(0, tables[0].X, privacy=plan.privacy, rng=np.random.default_rng(0))
    req = MomentRequest(0, 8).encode()
    centre = CentreBroadcast(1, 8, ShareReply.decode(site.handle(req)).values, full=True).encode()
    reply = ShareReply.decode(site.handle(centre))
    M = from_upper_triangle(reply.values, 8)
    assert np.all(np.isfinite(M)) and np.all(np.diag(M) > 0)  # noisy (not projected) release, rescaled
    with pytest.raises(PrivacyBudgetError):
        site.handle(req)
    with pytest.raises(PrivacyBudgetError):
        site.handle(centre)
    assert len(site.ledger.events(0)) == len(MomentSite(0, tables[0].X, privacy=plan.privacy,
                                                        rng=np.random.default_rng(0)).ledger.events(0))


def test_dp_fed_moments_recovers_most_edges():
    sim, tables = simulated_tables(10, 4, 5000, 2)
    r = _quiet(tables, LearnConfig(method="fed-moments", dp=DPConfig(epsilon=10), seed=1))
    from bnsl_cli.metrics import structure_metrics

    m = structure_metrics(r.W, sim.W)
    assert m["shd"] <= 3, m  # ε = 10, 20 000 rows, d = 10
