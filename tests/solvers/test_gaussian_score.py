"""One Gaussian score on moment matrices (bnsl_cli.solvers.gaussian_score), shared by the polish's
search (score_search) and fed-suffstats' (suffstats).

The merge kept every output to the bit: each function gives the bits of the score it replaced
(tests/solvers/_before_merge.py, the code before the merge) in both of its forms, on moments that are
well-conditioned, singular (a repeated column), partly missing (the polish's unexchanged pairs) and
noisy; and both searches, run end to end once with the merged score and once with the old one put
back in their modules, give the same graphs, weights, moves and reports."""

import numpy as np
import pytest

from bnsl_cli.dag import threshold_to_dag
from bnsl_cli.knowledge import Knowledge
from bnsl_cli.simulate import random_dag, random_weights
from bnsl_cli.solvers import score_search as polish_module
from bnsl_cli.solvers import moment_search as suffstats_module
from bnsl_cli.solvers.gaussian_score import (
    bic_of,
    check_score,
    dropped_residuals,
    ebic_penalty,
    family_rss,
    least_squares_weights,
)
from bnsl_cli.solvers.score_search import family_table, polish_graph
from bnsl_cli.solvers.moment_search import family_statistics, learn_from_moments

from . import _before_merge as old


def _bits(x):
    """Everything that decides equality to the bit (NaN and the sign of zero included)."""
    if isinstance(x, dict):
        return tuple((k, _bits(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return tuple(_bits(v) for v in x)
    if isinstance(x, (float, np.floating)):
        return ("float", float(x).hex())
    if isinstance(x, np.ndarray):
        return (x.dtype.str, x.shape, x.tobytes())
    return repr(x)


def _same(a, b) -> bool:
    return _bits(a) == _bits(b)


def _sym(d, std, rng):
    N = rng.standard_normal((d, d)) * std
    return np.triu(N) + np.triu(N, 1).T


def _case(seed: int):
    """``(W, n, moments)``: a random linear SEM and its moments in the forms the searches see."""
    rng = np.random.default_rng(500 + seed)
    d = (5, 8, 10, 12)[seed % 4]
    n = (200, 1000, 5000)[seed % 3]
    W = random_weights(random_dag(d, 2 * d, "er", rng), 0.5, 2.0, rng)
    X = (rng.standard_normal((n, d)) * rng.uniform(0.5, 2, d)) @ np.linalg.inv(np.eye(d) - W)
    X -= X.mean(0)
    G = X.T @ X / n
    Xs = X.copy()
    Xs[:, -1] = Xs[:, 0]  # a repeated column: G_SS singular for the parent sets holding both
    singular = Xs.T @ Xs / n
    known = rng.random((d, d)) < 0.6
    known = known | known.T | np.eye(d, dtype=bool)
    missing = np.where(known, G, np.nan)
    sd = np.sqrt(np.diag(G))
    noisy = G / np.outer(sd, sd) + _sym(d, 0.02, rng)
    w, V = np.linalg.eigh(noisy)
    psd = (V * np.maximum(w, 0.0)) @ V.T
    return W, n, {"exact": G, "singular": singular, "missing": missing, "noisy": noisy, "psd": 0.5 * (psd + psd.T)}


def _parent_sets(W, j):
    d = W.shape[0]
    others = [k for k in range(d) if k != j]
    return [[], list(np.flatnonzero(W[:, j])), others[:3], others, [0, d - 1] if j not in (0, d - 1) else others[:2]]


SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
def test_residual_variances_keep_both_forms(seed):
    W, n, M = _case(seed)
    d = W.shape[0]
    for j in range(d):
        for P in _parent_sets(W, j):
            S = np.asarray(sorted(P), dtype=int)
            for G in M.values():
                assert _same(family_rss(G, j, P), old.polish_family_rss(G, j, P))
            for name in ("exact", "singular", "noisy", "psd"):
                G = M[name]
                assert _same(family_rss(G, j, S, form="inverse"), old.suffstats_family_statistics(G, j, S, n, 0.0)[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_the_searches_family_tables_keep_their_bits(seed):
    """The polish's table (from every kind of moments, missing pairs included) and fed-suffstats'
    noise-aware statistics (one noise, several stacked noises) are computed on the shared fit."""
    W, n, M = _case(seed)
    d = W.shape[0]
    rng = np.random.default_rng(seed)
    u = np.exp(rng.uniform(-1, 1, d))
    H2 = np.stack([np.diag(u**2), np.eye(d)])
    for j in range(d):
        for P in _parent_sets(W, j):
            S = np.asarray(sorted(P), dtype=int)
            for G in M.values():
                assert _same(family_table(G, j, S), old.polish_family_table(G, j, S))
            for name in ("exact", "singular", "noisy", "psd"):
                G = M[name]
                for tau2, H in ((0.0, None), (0.02**2, None), (0.02**2, np.diag(u**2)), ([0.02**2, 0.01**2], H2)):
                    new = family_statistics(G, j, S, n, tau2, H)
                    assert _same(new, old.suffstats_family_statistics(G, j, S, n, tau2, H)), (name, j, P, tau2)
                R = family_statistics(G, j, S, n, 0.0)[0]
                assert _same(dropped_residuals(G, j, S, R), old.suffstats_dropped_residuals(G, j, S, R))


@pytest.mark.parametrize("seed", SEEDS)
def test_weights_and_bic_keep_both_forms(seed):
    W, n, M = _case(seed)
    d = W.shape[0]
    rng = np.random.default_rng(seed)
    dags = [W != 0, np.zeros((d, d), bool), np.triu(rng.random((d, d)) < 0.4, 1), np.triu(np.ones((d, d), bool), 1)]
    for G in M.values():
        for E in dags:
            assert _same(least_squares_weights(G, E), old.polish_least_squares_weights(G, E))
            for score in ("equal", "node"):
                assert _same(bic_of(G, n, E, score), old.polish_bic_of(G, n, E, score))
                pen = ebic_penalty(n, d)
                assert _same(bic_of(G, n, E, score, pen), old.polish_bic_of(G, n, E, score, pen))
    for name in ("exact", "singular", "noisy", "psd"):
        G = M[name]
        for E in dags:
            assert _same(least_squares_weights(G, E, form="lstsq"), old.suffstats_least_squares(G, E))
            for nn in (n, float(n)):
                pen = ebic_penalty(nn, d, units="statistic") / 2.0
                for score in ("equal", "node"):
                    assert _same(bic_of(G, nn, E, score, pen, form="inverse"), old.suffstats_bic(G, nn, E, score))


def test_the_extended_bic_is_one_formula_in_two_units():
    """The polish's penalty and fed-suffstats' κ, to the bit: κ is twice the penalty (exact), ``n`` at least 2."""
    rng = np.random.default_rng(0)
    ns = [0.5, 1, 1.5, 2, 3, 10, 200, 853, 1000, 5000, 40_000, 10**9, *rng.uniform(2, 1e6, 200), *rng.integers(2, 10**7, 200)]
    for n in ns:
        for d in (1, 2, 3, 7, 11, 20, 200, 5000):
            assert _same(ebic_penalty(n, d), old.polish_ebic_penalty(n, d))
            assert _same(ebic_penalty(n, d, units="statistic"), old.suffstats_edge_threshold(n, d))
            if n >= 2:
                assert _same(ebic_penalty(n, d, units="statistic"), 2.0 * ebic_penalty(n, d))
    assert ebic_penalty(1000, 10, units="statistic") == pytest.approx(np.log(1000) + 2 * np.log(10))


def test_dropped_residuals_are_the_refitted_ones():
    W, n, M = _case(2)
    G = M["exact"]
    j, P = 9, np.array([0, 3, 4, 8])
    R = family_rss(G, j, P, form="inverse")
    direct = [family_rss(G, j, np.delete(P, k), form="inverse") for k in range(P.size)]
    assert np.allclose(dropped_residuals(G, j, P, R), direct, rtol=1e-10, atol=0)
    assert np.allclose(direct, [family_rss(G, j, np.delete(P, k)) for k in range(P.size)], rtol=1e-10, atol=0)


class _Old:
    """The scores before the merge, put back into the searches' modules (the search code is the same)."""

    @staticmethod
    def polish(mp):
        mp.setattr(polish_module, "family_table", old.polish_family_table)
        mp.setattr(polish_module, "family_rss", old.polish_family_rss)
        mp.setattr(polish_module, "bic_of", old.polish_bic_of)
        mp.setattr(polish_module, "least_squares_weights", old.polish_least_squares_weights)
        mp.setattr(polish_module, "ebic_penalty", old.polish_ebic_penalty)

    @staticmethod
    def suffstats(mp):
        def kappa(n, d, units):
            assert units == "statistic"
            return old.suffstats_edge_threshold(n, d)

        def bic(G, n, E, score, penalty, form):
            assert form == "inverse" and _same(penalty, old.suffstats_edge_threshold(n, G.shape[0]) / 2.0)
            return old.suffstats_bic(G, n, E, score)

        def weights(G, E, form):
            assert form == "lstsq"
            return old.suffstats_least_squares(G, E)

        mp.setattr(suffstats_module, "family_statistics", old.suffstats_family_statistics)
        mp.setattr(suffstats_module, "dropped_residuals", old.suffstats_dropped_residuals)
        mp.setattr(suffstats_module, "ebic_penalty", kappa)
        mp.setattr(suffstats_module, "bic_of", bic)
        mp.setattr(suffstats_module, "least_squares_weights", weights)


def _knowledge(W, rng):
    d = W.shape[0]
    names = tuple(f"x{k}" for k in range(d))
    req = tuple(map(tuple, np.argwhere(W != 0)[:1].tolist()))
    forb = tuple((int(a), int(b)) for a, b in np.argwhere(rng.random((d, d)) < 0.1) if a != b and (a, b) not in req)
    return Knowledge(names, required=req, forbidden=forb)


def _polish_runs(seed):
    W, n, M = _case(seed)
    d = W.shape[0]
    rng = np.random.default_rng(seed)
    W_raw = W + rng.normal(0, 0.15, W.shape) * (rng.random(W.shape) < 0.3)
    np.fill_diagonal(W_raw, 0.0)
    W0 = threshold_to_dag(np.where(np.abs(W_raw) > 0.3, W_raw, 0.0), 0.3)[0]
    G = M["singular"] if seed % 4 == 3 else M["exact"]
    noise = 0.01 * np.outer(np.sqrt(np.diag(G)), np.sqrt(np.diag(G))) if seed % 2 else None
    Gn = G + _sym(d, 0.01, rng) if seed % 2 else G
    know = _knowledge(W, rng) if seed % 3 == 2 else None
    out = []
    for score in ("equal", "node", "auto"):
        for additions in ("consensus", "all"):
            Gin = Gn if additions == "all" else np.where(np.isfinite(M["missing"]), Gn, np.nan)
            r = polish_graph(Gin, n, W0, W_raw, 0.1 if score == "auto" else None, noise_std=noise, score=score,
                             additions=additions, knowledge=know)
            out.append((r.W, r.info))
    return out


def _suffstats_runs(seed):
    W, n, M = _case(seed)
    d = W.shape[0]
    rng = np.random.default_rng(seed)
    know = _knowledge(W, rng) if seed % 3 == 2 else None
    out = []
    for tau, G in ((0.0, M["psd"]), (0.02, M["noisy"])):
        for score in ("equal", "node", "auto"):
            for start in ("order", "empty"):
                r = learn_from_moments(G, n, tau, score=score, start=start, knowledge=know)
                out.append((r.W, r.E, r.info))
    u = np.exp(rng.uniform(-1, 1, d))
    r = learn_from_moments(M["noisy"] * np.outer(u, u), n, [0.02, 0.01], H=np.stack([np.diag(u**2), np.eye(d)]))
    out.append((r.W, r.E, r.info))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_both_searches_give_the_graphs_and_weights_of_the_scores_before_the_merge(seed, monkeypatch):
    polish_new, suffstats_new = _polish_runs(seed), _suffstats_runs(seed)
    with monkeypatch.context() as mp:
        _Old.polish(mp)
        _Old.suffstats(mp)
        polish_old, suffstats_old = _polish_runs(seed), _suffstats_runs(seed)
    assert _same(polish_new, polish_old)
    assert _same(suffstats_new, suffstats_old)
    assert any(r[1].get("applied") and r[1]["edges_after"] for r in polish_new)  # the runs found graphs
    assert any(r[1].sum() for r in suffstats_new)


def test_bad_choices_are_refused():
    G = np.eye(3)
    E = np.zeros((3, 3), bool)
    with pytest.raises(ValueError, match="form"):
        family_rss(G, 0, [1], form="lu")
    with pytest.raises(ValueError, match="form"):
        least_squares_weights(G, E, form="inverse")
    with pytest.raises(ValueError, match="form"):
        bic_of(G, 10, E, "equal", form="lstsq")
    with pytest.raises(ValueError, match="units"):
        ebic_penalty(10, 3, units="bits")
    with pytest.raises(ValueError, match="score"):
        check_score("other")
    with pytest.raises(ValueError, match="score"):
        check_score("auto", auto=False)
    check_score("auto")
    check_score("node", auto=False)
