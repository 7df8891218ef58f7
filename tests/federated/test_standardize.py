"""--standardize: pooled statistics, scale invariance, original units, the scale warning, no numpy
overflow warning, and the DP statistics (post-processing of already released values)."""

import math
import warnings

import numpy as np
import pytest

from bnsl_cli.errors import InputDataError, NoDagError, ScaleWarning
from bnsl_cli.federated.messages import HEADER, CentreBroadcast, ShareReply, StandardizeBroadcast, StatsRequest
from bnsl_cli.federated.methods.registry import METHODS
from bnsl_cli.stats import (
    SCALE_WARN_RATIO,
    column_stats,
    sum_shares,
    scale_warning,
    variance_share,
    to_original_units,
)
from bnsl_cli.io.table import Table
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.learn import learn
from tests._sim import simulated_tables



@pytest.fixture(scope="module")
def shards():
    return simulated_tables(6, 3, 600, 4)


def _scaled(tables, factors, shift=0.0):
    f = np.asarray(factors, dtype=float)
    return [Table(t.X * f + shift, t.names, t.path) for t in tables]


def _run(tables, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("error", RuntimeWarning)  # a numpy overflow/invalid warning fails the test
        r = learn(tables, LearnConfig(**_taken(kw)))
    return r, caught


def _taken(kw: dict) -> dict:
    """``kw`` without ``rounds`` for a method that takes no --rounds (the option check refuses it there)."""
    from bnsl_cli.federated.methods.registry import default_method, method_spec

    method = kw.get("method") or default_method(kw.get("dp") is not None)
    return {k: v for k, v in kw.items() if k != "rounds" or "--rounds" in method_spec(method).options}


def _graphs(r):
    return r.local if r.local is not None else [r.W]


def test_pool_stats_exact_against_the_pooled_rows():
    rng = np.random.default_rng(0)
    blocks = [(rng.normal(0, 1, size=(n, 3)) + [1e4, -3, 7] + k) * [1, 1e3, 1e-6] for k, n in enumerate((40, 77, 13))]
    parts = [column_stats(B) for B in blocks]
    X = np.vstack(blocks)
    # pooled as the standardisation stage pools: shares of the mean, then of the variances about it
    mean = sum_shares(p[1] / X.shape[0] for p in parts)
    sd = np.sqrt(np.maximum(sum_shares(variance_share(p[0], p[1], p[2], mean, X.shape[0]) for p in parts), 0.0))
    np.testing.assert_allclose(mean, X.mean(axis=0), rtol=1e-14)
    ref = np.array([np.sqrt(np.mean((X[:, j].astype(np.longdouble) - X[:, j].astype(np.longdouble).mean()) ** 2)) for j in range(3)], dtype=float)
    np.testing.assert_allclose(sd, ref, rtol=1e-10)
    # the sum-shaped encoding: shares of the mean, then shares of the variances about the pooled mean
    n = X.shape[0]
    mu = np.sum([p[1] / n for p in parts], axis=0)
    np.testing.assert_allclose(mu, X.mean(axis=0), rtol=1e-14)
    var = np.sum([variance_share(p[0], p[1], p[2], mu, n) for p in parts], axis=0)
    np.testing.assert_allclose(np.sqrt(var), ref, rtol=1e-10)


def test_stats_messages_round_trip():
    d = 5
    assert len(StatsRequest(0, d).encode()) == HEADER.size
    rep = ShareReply(0, 2, d, np.arange(d) * 1.5)
    back = ShareReply.decode(rep.encode())
    assert back.sender == 2 and np.array_equal(back.values, rep.values)
    cb = CentreBroadcast.decode(CentreBroadcast(1, d, np.arange(d) * 0.5).encode())
    assert not cb.full and np.array_equal(cb.mean, np.arange(d) * 0.5)
    b = StandardizeBroadcast(0, d, np.ones(d), np.full(d, 2.0))
    assert len(b.encode()) == HEADER.size + 16 * d
    back = StandardizeBroadcast.decode(b.encode())
    assert np.array_equal(back.sd, b.sd)
    off = StandardizeBroadcast.decode(StandardizeBroadcast(0, d, None, None).encode())
    assert off.mean is None


@pytest.mark.parametrize("method", METHODS)
def test_scale_invariance(shards, method):
    _, tables = shards
    base, _ = _run(tables, method=method, standardize=True, rounds=40)
    assert sum(int((G != 0).sum()) for G in _graphs(base)) > 0
    for factors in ([1e-3, 1, 1e6, 1, 1, 1], [1e6, 1e-3, 1, 1e3, 1e-2, 1e5], [7.0, 1e4, 1e-3, 1e-3, 1e6, 0.5]):
        r, caught = _run(_scaled(tables, factors, shift=3.0), method=method, standardize=True, rounds=40)
        assert not [w for w in caught if issubclass(w.category, ScaleWarning)]
        f = np.asarray(factors)
        for G0, G1 in zip(_graphs(base), _graphs(r)):
            assert np.array_equal(G0 != 0, G1 != 0), factors  # SHD 0
            # weights in original units: W[i, j] scales with f_j / f_i (up to the solvers' tolerances:
            # the standardised inputs differ in the last bits, L-BFGS-B stops at ~1e-5 relative)
            expect = G0 * (f[None, :] / f[:, None])
            np.testing.assert_allclose(G1, expect, rtol=1e-3, atol=0)


def test_weights_reported_in_original_units(shards):
    _, tables = shards
    f = np.array([1e3, 1.0, 1e-2, 5.0, 1.0, 1e4])
    r, _ = _run(_scaled(tables, f), method="fed-moments", standardize=True)
    std = r.report["standardize"]
    sd = np.asarray(std["sd"])
    assert std["applied"] and "sd_j / sd_i" in std["weights"]
    W_std = r.W * (sd[:, None] / sd[None, :])
    assert np.all(np.abs(W_std[r.W != 0]) > 0.3)  # the threshold applies to the standardised weights
    np.testing.assert_allclose(to_original_units(W_std, sd), r.W, rtol=1e-12)


# local-notears, one column ×1000: on CPUs without AVX-512 (CI since 2026-12-07) one site's NOTEARS overflows
# in its augmented Lagrangian (ρ at its cap, h = 10 after 2 outer steps) and the run stops with the designed
# error ("… the optimisation overflowed … rerun with --standardize"); elsewhere it finished with the warning.
# Whether a badly scaled NOTEARS overflows is decided by the CPU's rounding here: a known miss (issue 45's
# unit-free arrows are the fix), not a changed expectation.
_LOCAL_OVERFLOWS = pytest.mark.xfail(reason="NOTEARS at its ρ cap overflows on some CPUs (exit 4 by design)",
                                     strict=False)


@pytest.mark.parametrize("method", ["fed-sparse", "fed-moments", "notears",
                                    pytest.param("local-notears", marks=_LOCAL_OVERFLOWS)])
def test_scale_warning_once_without_standardize(shards, method):
    _, tables = shards
    r, caught = _run(_scaled(tables, [1.0, 1.0, 1e3, 1.0, 1.0, 1.0]), method=method, rounds=40)
    scale = [w for w in caught if issubclass(w.category, ScaleWarning)]
    assert len(scale) == 1 and "--standardize" in str(scale[0].message)
    assert "\n" not in str(scale[0].message)
    assert sum(1 for m in r.report["warnings"] if "--standardize" in m) == 1
    _, caught = _run(tables, method=method, rounds=40)
    assert not [w for w in caught if issubclass(w.category, ScaleWarning)]


def test_scale_warning_threshold():
    names = ("a", "b")
    assert scale_warning(np.array([1.0, SCALE_WARN_RATIO * 0.99]), names) is None
    assert "b sd" in scale_warning(np.array([1.0, SCALE_WARN_RATIO * 1.01]), names)


@pytest.mark.parametrize("method", METHODS)
def test_extreme_scales_never_leak_a_numpy_warning(method):
    # columns on scales 1e-3 … 1e12: with --standardize the graph of the unscaled data; without it a
    # clear error or a graph with the scale warning — never a numpy RuntimeWarning (turned into errors)
    sim, tables = simulated_tables(8, 4, 1000, 1)
    big = _scaled(tables, 10.0 ** np.linspace(-3, 12, 8))
    ref, _ = _run(tables, method=method, standardize=True)
    r, _ = _run(big, method=method, standardize=True)
    for G0, G1 in zip(_graphs(ref), _graphs(r)):
        assert np.array_equal(G0 != 0, G1 != 0)
    try:
        r, caught = _run(big, method=method)
    except NoDagError as e:
        assert "--standardize" in str(e) and "\n" not in str(e)
    else:
        assert any(issubclass(w.category, ScaleWarning) for w in caught)
        assert all(np.all(np.isfinite(G)) for G in _graphs(r))


def test_constant_column_is_a_clear_error(shards):
    _, tables = shards
    flat = [Table(np.column_stack([t.X[:, :5], np.full(t.n, 2.0)]), t.names, t.path) for t in tables]
    for method in ("fed-sparse", "fed-moments", "notears"):
        with pytest.raises(InputDataError, match="no spread"):
            _run(flat, method=method, standardize=True)


def test_standardize_exchange_bytes(shards):
    _, tables = shards
    d, P = 6, 3
    r, _ = _run(tables, method="fed-sparse", standardize=True, rounds=5)
    c = r.report["communication"]["standardize"]
    # up: the shares of the means and of the variances; down: the request, the pooled mean, (μ, σ)
    assert c["bytes_up"] == P * 2 * (HEADER.size + 8 * d)
    assert c["bytes_down"] == P * (HEADER.size + (HEADER.size + 8 * d) + (HEADER.size + 16 * d))


@pytest.mark.parametrize("method", ["fed-sparse", "fed-bnsl"])
def test_dp_standardize_reuses_the_released_statistics(method):
    sim, tables = simulated_tables(6, 3, 3000, 2)
    eps = 6.0
    plain, _ = _run(tables, method=method, dp=DPConfig(epsilon=eps), seed=3, rounds=10)
    std, _ = _run(_scaled(tables, [1e-3, 1, 1e4, 1, 1, 1]), method=method, standardize=True,
                  dp=DPConfig(epsilon=eps), seed=3, rounds=10)
    a, b = plain.report["privacy"], std.report["privacy"]
    # the same releases and the same spend: the statistics are post-processing of the column means
    # and second moments every private participant releases anyway
    assert a["plan"]["releases"] == b["plan"]["releases"]
    assert math.isclose(b["epsilon"], eps, rel_tol=1e-9) and b["epsilon"] <= eps * (1 + 1e-12)
    for pa, pb in zip(a["participants"], b["participants"]):
        ka = sorted((e["release"], e["count"]) for e in pa["events"] if e["release"] not in ("coordinate-update",))
        kb = sorted((e["release"], e["count"]) for e in pb["events"] if e["release"] not in ("coordinate-update",))
        assert ka == kb
        assert math.isclose(pb["rho"], b["plan"]["rho_planned"], rel_tol=1e-9) or pb["rho"] <= b["plan"]["rho_planned"]
    assert "no extra privacy cost" in std.report["standardize"]["source"]
    assert std.report["standardize"]["applied"]
    sd = np.asarray(std.report["standardize"]["sd"])
    # the released statistics see the scaling: sd ratio ≈ 1e4 / 1e-3 between columns 3 and 1
    assert 1e6 < sd[2] / sd[0] < 1e8


def test_standardize_same_result_in_worker_processes(shards):
    _, tables = shards
    a, _ = _run(tables, method="fed-sparse", standardize=True, rounds=20)
    b, _ = _run(tables, method="fed-sparse", standardize=True, rounds=20, workers=2)
    assert np.array_equal(a.W, b.W)
    assert a.report["communication"]["bytes_total"] == b.report["communication"]["bytes_total"]


def test_network_fleet_accepts_the_new_exchanges():
    from bnsl_cli.federated.messages import HEADER, MomentRequest
    from bnsl_cli.federated.messages import validate_reply as check_reply

    def retired(kind, rnd, sender, d, rows, n_values):
        """A message of a retired kind (21: per-site statistics, 24: per-site moments) as the old
        encoding laid it out: header, then float64 values."""
        return HEADER.pack(kind, 1, rnd, sender, d, rows) + np.zeros(n_values).tobytes()

    d = 4
    req = StatsRequest(0, d).encode()
    good = ShareReply(0, 1, d, np.zeros(d)).encode()
    assert check_reply(req, good, 1) is None
    assert "malformed" in check_reply(req, good[:-8], 1)
    assert check_reply(req, None, 1) is not None
    # the per-site statistics of the old encoding are no longer an answer
    assert check_reply(req, retired(21, 0, 1, d, 10, 2 * d), 1) is not None
    centre = CentreBroadcast(1, d, np.zeros(d)).encode()
    assert check_reply(centre, ShareReply(1, 1, d, np.zeros(d)).encode(), 1) is None
    assert check_reply(centre, ShareReply(0, 1, d, np.zeros(d)).encode(), 1) is not None  # wrong round
    # the standardisation broadcast needs no reply
    assert check_reply(StandardizeBroadcast(0, d, np.zeros(d), np.ones(d)).encode(), None, 0) is None
    mreq = MomentRequest(0, d).encode()
    assert check_reply(mreq, ShareReply(0, 2, d, np.zeros(d)).encode(), 2) is None
    assert check_reply(mreq, retired(24, 0, 2, d, 10, d + d * (d + 1) // 2), 2) is not None
    full = CentreBroadcast(1, d, np.zeros(d), full=True).encode()
    assert check_reply(full, ShareReply(1, 2, d, np.zeros(d * (d + 1) // 2)).encode(), 2) is None
    assert "malformed" in check_reply(full, ShareReply(1, 2, d, np.zeros(d)).encode(), 2)
