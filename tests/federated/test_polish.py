"""The polish: pair selection, the second-moment exchange, the local search and its privacy."""

import warnings

import numpy as np
import pytest

from bnsl_cli.federated.methods.admm.dp_site import DPSparseParticipant, private_polish_moments
from bnsl_cli.federated.messages import HEADER, GramReply, GramRequest
from bnsl_cli.federated.methods.admm.site import SparseParticipant
from bnsl_cli.federated.polish import candidate_edges, polish_pairs
from bnsl_cli.solvers.score_search import (
    least_squares_weights,
    polish_graph,
    prune_within_noise,
    score_search,
)
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.metrics import structure_metrics
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.privacy.defaults import POLISH_SHARE
from bnsl_cli.learn import DPConfig
from bnsl_cli.simulate import simulate
from tests._sim import simulated_tables


def hill_climb(G, n, E0, candidates, noise_std=None):
    """The score search with additions restricted to the directed pairs ``candidates``."""
    allowed = np.zeros(G.shape, dtype=bool)
    for i, j in candidates:
        allowed[i, j] = True
    return score_search(G, n, E0, allowed, "equal", noise_std=noise_std)


def _population_gram(W):
    """Second moments of x = x W + e with unit-variance noise: (I − W)⁻ᵀ (I − W)⁻¹."""
    d = W.shape[0]
    A = np.linalg.inv(np.eye(d) - W)
    return A.T @ A


def _collider_and_child():
    # 0 → 2, 1 → 2, 3 → 2 (a collider), 2 → 4 (its child)
    W = np.zeros((5, 5))
    W[0, 2], W[1, 2], W[3, 2], W[2, 4] = 1.2, -0.9, 0.8, 1.5
    return W


def test_search_fixes_a_collider_child_swap_from_exact_moments():
    W = _collider_and_child()
    G = _population_gram(W)
    # the local optimum seen at d = 200: the collider's parents attach to the child, which points back
    E0 = np.zeros((5, 5), dtype=bool)
    E0[0, 4] = E0[1, 4] = E0[3, 4] = E0[4, 2] = True
    cands = [(i, j) for i in range(5) for j in range(5) if i != j]
    E, moves = hill_climb(G, 100_000, E0, cands)
    assert np.array_equal(E, W != 0), moves
    assert moves  # it did move
    np.testing.assert_allclose(least_squares_weights(G, E), W, atol=1e-9)


def test_search_does_not_move_from_the_truth():
    W = _collider_and_child()
    E, moves = hill_climb(_population_gram(W), 100_000, W != 0, candidate_edges(W + 0.3 * (W.T != 0), 0.1))
    assert moves == [] and np.array_equal(E, W != 0)


def test_noisy_moments_add_and_keep_only_edges_above_the_noise():
    W = _collider_and_child()
    G = _population_gram(W)
    E_true = W != 0
    spurious = E_true.copy()
    spurious[0, 1] = True  # 0 and 1 are independent: partial second moment 0
    cands = [(i, j) for i in range(5) for j in range(5) if i != j]
    quiet = np.full((5, 5), 1e-3)
    E, dropped = prune_within_noise(G, spurious, quiet)
    assert dropped == 1 and np.array_equal(E, E_true)
    # with exact moments the BIC search adds nothing to the truth; with a noise std above every
    # partial second moment, nothing may be added even to an empty graph, and pruning empties a graph
    loud = np.full((5, 5), 10.0)
    E, moves = hill_climb(G, 100_000, np.zeros((5, 5), dtype=bool), cands, noise_std=loud)
    assert not [m for m in moves if m[0] == "add"]
    E, moves = hill_climb(G, 100_000, np.zeros((5, 5), dtype=bool), cands, noise_std=quiet)
    assert len([m for m in moves if m[0] == "add"]) >= 4
    E, dropped = prune_within_noise(G, E_true, loud)
    assert dropped == 4 and not E.any()


def test_the_requested_pairs_are_all_the_search_reads():
    """Run the polish on moments known only on the requested pairs (NaN elsewhere): same result as
    with every moment known, so the request covers everything the search and the fit use."""
    sim = simulate(15, 15, participants=1, samples=4000, seed=2)
    X = sim.shards[0] - sim.shards[0].mean(axis=0)
    G = X.T @ X / X.shape[0]
    rng = np.random.default_rng(0)
    W_raw = sim.W.T * 0.8 + (rng.random((15, 15)) < 0.05) * 0.2  # reversed edges and some noise
    np.fill_diagonal(W_raw, 0)
    W0 = np.where(np.abs(W_raw) > 0.3, W_raw, 0.0)
    from bnsl_cli.dag import threshold_to_dag

    W0 = threshold_to_dag(W0, 0.3)[0]
    pairs = polish_pairs(W_raw, W0 != 0)
    d = 15
    a, b = pairs // d, pairs % d
    assert np.all(a <= b)
    masked = np.full_like(G, np.nan)
    masked[a, b] = G[a, b]
    masked[b, a] = G[b, a]
    full = polish_graph(G, X.shape[0], W0, W_raw, 0.3)
    part = polish_graph(masked, X.shape[0], W0, W_raw, 0.3)
    assert part.info["applied"]
    np.testing.assert_array_equal(part.W, full.W)
    assert pairs.size < d * (d + 1) // 2  # and it is not simply everything


def test_gram_messages_round_trip_with_their_byte_size():
    pairs = np.array([0, 5, 17, 99], dtype=np.int64)
    req = GramRequest(7, 10, pairs)
    data = req.encode()
    assert len(data) == HEADER.size + 4 * pairs.size
    back = GramRequest.decode(data)
    assert back.round == 7 and back.d == 10 and np.array_equal(back.pairs, pairs)
    vals = np.array([1.5, -2.0, 0.25, 3.0])
    rep = GramReply(7, 3, 10, vals).encode()
    assert len(rep) == HEADER.size + 8 * vals.size
    out = GramReply.decode(rep)
    assert out.sender == 3 and np.array_equal(out.values, vals)
    with pytest.raises(ValueError):
        GramReply.decode(data)


def test_participant_answers_with_its_share_of_the_pooled_moments():
    sim = simulate(6, 6, participants=2, samples=500, seed=1)
    n_total = 1000
    parts = [SparseParticipant(k, X, n_total, 0.01, 10) for k, X in enumerate(sim.shards)]
    pairs = np.array([0, 7, 14, 3, 35], dtype=np.int64)
    total = sum(GramReply.decode(p.handle(GramRequest(1, 6, pairs).encode())).values for p in parts)
    ref = sum((X - X.mean(0)).T @ (X - X.mean(0)) for X in sim.shards) / n_total
    np.testing.assert_allclose(total, ref[pairs // 6, pairs % 6], rtol=1e-12)


RELEASE_POLISH = ReleaseKind.POLISH


def _dp_participant(X, multiplier, rng):
    return DPSparseParticipant(
        0, X, X.shape[0], 0.01, 5, one_offs={ReleaseKind.SECOND_MOMENTS: 1e-12}, value_bound=1e3,
        gumbel_multiplier=1.0, sigma_multiplier=1.0, rng=rng, polish_multiplier=multiplier,
    )


def _release(Xc, v_hat, pairs, multiplier, rng, n_total):
    """The private polish release as a plain function (returns values and the event)."""
    from bnsl_cli.privacy.defaults import POLISH_CLIP

    return private_polish_moments(Xc, v_hat, pairs, POLISH_CLIP, multiplier, n_total, rng)


def _upper_pairs(d):
    k = np.arange(d * d, dtype=np.int64)
    return k[k // d <= k % d]


def test_private_moments_have_the_calibrated_noise_and_are_recorded():
    sim = simulate(5, 5, participants=1, samples=400, seed=4)
    X = sim.shards[0]
    pairs = _upper_pairs(5)
    req = GramRequest(1, 5, pairs).encode()
    mult = 0.7
    from bnsl_cli.privacy.defaults import POLISH_CLIP

    Xc = X - X.mean(axis=0)
    v_hat = (Xc * Xc).mean(axis=0)
    a, b = pairs // 5, pairs % 5
    scale = np.sqrt(v_hat[a] * v_hat[b])
    U = Xc[:, a] * Xc[:, b] / scale
    c_row = POLISH_CLIP * np.sqrt(pairs.size)
    U *= np.minimum(1.0, c_row / np.linalg.norm(U, axis=1))[:, None]
    clipped = U.sum(axis=0)
    rng = np.random.default_rng(5)
    draws, evs = [], []
    for _ in range(400):  # each draw is a fresh release here (a run makes one)
        values, ev = _release(Xc, v_hat, pairs, mult, rng, X.shape[0])
        draws.append(values)
        evs.append(ev)
    z = (np.array(draws) * X.shape[0] / scale - clipped)  # in units of the standardised sums
    expected = mult * 2.0 * c_row
    assert np.all(np.abs(z.mean(axis=0)) < 4 * expected / np.sqrt(400))
    np.testing.assert_allclose(z.std(axis=0), expected, rtol=0.15)
    assert all(ev.release == RELEASE_POLISH for ev in evs)
    # a participant answers the request with the same release, recorded in its own ledger
    dp = _dp_participant(X, mult, np.random.default_rng(5))
    GramReply.decode(dp.handle(req))
    assert [ev for ev in dp.events() if ev.release == RELEASE_POLISH][0].sensitivity == pytest.approx(2.0 * c_row)
    assert evs[0].sensitivity == pytest.approx(2.0 * c_row)
    assert evs[0].rho_each == pytest.approx(1.0 / (2.0 * mult**2))


def test_private_moments_bound_each_row_and_keep_the_least_squares_fit():
    """Replacing one row by an outlier moves the (noise-free) standardised sums by at most the
    sensitivity 2κ√|Q|; the clipped moments give nearly the exact least-squares weights."""
    sim = simulate(6, 6, participants=1, samples=2000, seed=7)
    X = sim.shards[0]
    pairs = _upper_pairs(6)
    from bnsl_cli.privacy.defaults import POLISH_CLIP

    tiny = 1e-12  # (almost) no noise, to look at the clipped sums themselves
    centre = X.mean(axis=0)  # the same released centre and public scales on both neighbours
    Xc = X - centre
    v_hat = (Xc * Xc).mean(axis=0)
    Y = X.copy()
    Y[17] = 1e3 * np.sign(np.arange(6) - 2.5)
    a, b = pairs // 6, pairs % 6
    scale = np.sqrt(v_hat[a] * v_hat[b])
    g1 = _release(Xc, v_hat, pairs, tiny, np.random.default_rng(0), X.shape[0])[0] * X.shape[0] / scale
    g2 = _release(Y - centre, v_hat, pairs, tiny, np.random.default_rng(0), X.shape[0])[0] * X.shape[0] / scale
    c_row = POLISH_CLIP * np.sqrt(pairs.size)
    assert np.linalg.norm(g1 - g2) <= 2 * c_row * (1 + 1e-9)
    # the clipping shrinks rows with a large norm; the least-squares weights (which ignore a common
    # scale of the moments) stay close to those of the exact moments, and clipping really happens
    exact = (Xc[:, a] * Xc[:, b]).sum(axis=0) / scale
    assert np.abs(g1 - exact).max() > 0.01 * X.shape[0]

    def full(v):
        G = np.zeros((6, 6))
        G[a, b] = v * scale
        G[b, a] = v * scale
        return G

    W_clip = least_squares_weights(full(g1), sim.W != 0)
    W_exact = least_squares_weights(full(exact), sim.W != 0)
    assert np.abs(W_clip - W_exact).max() < 0.1
    assert np.abs(W_exact - sim.W).max() < 0.1


def test_private_participant_releases_the_moments_once_and_only_with_a_budget():
    from bnsl_cli.errors import PrivacyBudgetError

    sim = simulate(4, 4, participants=1, samples=200, seed=0)
    req = GramRequest(1, 4, np.array([0, 1], dtype=np.int64)).encode()
    dp = _dp_participant(sim.shards[0], None, np.random.default_rng(0))
    with pytest.raises(PrivacyBudgetError):
        dp.handle(req)
    dp = _dp_participant(sim.shards[0], 1.0, np.random.default_rng(0))
    dp.handle(req)
    with pytest.raises(PrivacyBudgetError, match="already released"):
        dp.handle(req)
    assert sum(ev.count for ev in dp.events() if ev.release == RELEASE_POLISH) == 1


@pytest.fixture(scope="module")
def shards():
    return simulated_tables(12, 4, 2000, seed=11)


def test_learn_reports_the_polish_and_counts_its_bytes(shards):
    sim, tables = shards
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on = learn(tables, LearnConfig(seed=0))
        off = learn(tables, LearnConfig(seed=0, polish=False))
    pol = on.report["polish"]
    assert pol["applied"] and pol["pairs"] > 0
    c_on, c_off = on.report["communication"], off.report["communication"]
    # one request down (header + 4 bytes a pair) and one reply up (header + 8 bytes a pair) per participant
    assert c_on["polish"]["bytes_down"] == 4 * (HEADER.size + 4 * pol["pairs"])
    assert c_on["polish"]["bytes_up"] == 4 * (HEADER.size + 8 * pol["pairs"])
    assert c_on["bytes_total"] == c_on["bytes_up"] + c_on["bytes_down"]
    # the rounds plus the pre-round column-statistics exchange (scale check / --standardize)
    assert sum(r["bytes_up"] for r in c_on["per_round"]) + c_on["standardize"]["bytes_up"] == c_on["bytes_up"]
    assert c_off["polish"] == {"bytes_up": 0, "bytes_down": 0}
    assert off.report["polish"] == {"applied": False, "reason": "--no-polish"}
    # the same ADMM rounds, then the polish: the consensus is untouched
    np.testing.assert_array_equal(on.W_raw, off.W_raw)
    assert structure_metrics(on.W, sim.W)["shd"] <= structure_metrics(off.W, sim.W)["shd"]
    assert structure_metrics(on.W, sim.W)["is_dag"]


def test_fed_bnsl_is_not_polished(shards):
    _, tables = shards
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = learn(tables, LearnConfig(method="fed-bnsl", rounds=5)).report
    assert rep["polish"] is None and rep["communication"]["polish"]["bytes_up"] == 0


def test_private_polish_is_accounted_and_the_budget_is_exact(shards):
    _, tables = shards
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = learn(tables, LearnConfig(method="fed-sparse", seed=1, rounds=5, dp=DPConfig(epsilon=5.0)))
    priv = res.report["privacy"]
    assert "polish-second-moments" in priv["released_values"]
    assert priv["plan"]["polish_share"] == pytest.approx(POLISH_SHARE)
    assert priv["epsilon"] == pytest.approx(5.0, rel=1e-9)
    assert res.report["polish"]["applied"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = learn(tables, LearnConfig(method="fed-sparse", seed=1, rounds=5, polish=False, dp=DPConfig(epsilon=5.0)))
    assert "polish-second-moments" not in off.report["privacy"]["released_values"]
    assert off.report["privacy"]["plan"]["polish_share"] == 0.0
    assert off.report["privacy"]["epsilon"] == pytest.approx(5.0, rel=1e-9)


# -- the score search, the per-node score and edges decided by evidence ------------------------------


def _population_gram_sd(W, sd):
    """Second moments of x = x W + e with noise sds ``sd``: (I − W)⁻ᵀ diag(sd²) (I − W)⁻¹."""
    A = np.linalg.inv(np.eye(W.shape[0]) - W)
    return A.T @ np.diag(np.asarray(sd, float) ** 2) @ A


def test_family_tables_match_the_direct_residual_variances():
    from bnsl_cli.solvers.score_search import family_table, family_rss

    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 7)) @ rng.normal(size=(7, 7))
    G = X.T @ X / 500
    S = np.array([1, 4])
    R, add, part, drop = family_table(G, 0, S)
    assert R == pytest.approx(family_rss(G, 0, [1, 4]))
    for i in (2, 3, 5, 6):
        assert add[i] == pytest.approx(family_rss(G, 0, [1, 4, i]))
    assert np.isnan(add[[0, 1, 4]]).all()
    assert drop == pytest.approx([family_rss(G, 0, [4]), family_rss(G, 0, [1])])
    # a missing moment makes exactly the pairs that need it unavailable
    G2 = G.copy()
    G2[3, 1] = G2[1, 3] = np.nan
    _, add2, _, _ = family_table(G2, 0, S)
    assert np.isnan(add2[3]) and add2[2] == pytest.approx(add[2])


def test_bic_prefers_the_per_node_model_only_when_the_variances_differ():
    from bnsl_cli.solvers.score_search import bic_of

    W = _collider_and_child()
    E = W != 0
    n = 50_000
    same = _population_gram(W)
    differ = _population_gram_sd(W, [0.3, 2.0, 1.0, 0.5, 3.0])
    assert bic_of(same, n, E, "equal") < bic_of(same, n, E, "node")
    assert bic_of(differ, n, E, "node") < bic_of(differ, n, E, "equal")
    # and both models score the truth above the truth with a spurious edge
    extra = E.copy()
    extra[0, 1] = True
    for G in (same, differ):
        for sc in ("equal", "node"):
            assert bic_of(G, n, E, sc) < bic_of(G, n, extra, sc)


def test_per_node_search_recovers_unequal_variance_structure_from_empty():
    """With noise sds differing 10-fold the per-node score recovers the skeleton and the collider
    (the Markov equivalence class) from an empty start, and "auto" chooses it."""
    from bnsl_cli.metrics import structure_metrics as sm

    W = _collider_and_child()
    G = _population_gram_sd(W, [0.3, 2.0, 1.0, 0.5, 3.0])
    zero = np.zeros((5, 5))
    E = polish_graph(G, 100_000, zero, zero, None, additions="all", score="node").W != 0
    skel = E | E.T
    assert np.array_equal(skel, (W != 0) | (W != 0).T)
    assert E[0, 2] and E[1, 2] and E[3, 2]  # the collider's parents, oriented
    res = polish_graph(G, 100_000, np.zeros((5, 5)), np.zeros((5, 5)), None, additions="all", score="auto")
    assert "per-node" in res.info["score"] and res.info["bic"]["node"] < res.info["bic"]["equal"]
    assert sm(res.W, W)["shd"] == 0


def test_auto_score_keeps_the_equal_variance_model_on_equal_variances():
    W = _collider_and_child()
    G = _population_gram(W)
    res = polish_graph(G, 100_000, np.zeros((5, 5)), np.zeros((5, 5)), None, additions="all", score="auto")
    assert res.info["score"].startswith("equal-variance")
    assert np.array_equal(res.W != 0, W != 0)


def test_weak_edges_survive_by_evidence_and_the_threshold_is_an_override():
    W = _collider_and_child()
    W[1, 2] = 0.2  # weak but, with n = 100 000, well supported
    G = _population_gram(W)
    W_raw = np.zeros((5, 5))  # nothing in the consensus: every edge comes from the score
    scored = polish_graph(G, 100_000, W_raw, W_raw, None, additions="all")
    assert np.array_equal(scored.W != 0, W != 0)
    assert scored.W[1, 2] == pytest.approx(0.2)
    cut = polish_graph(G, 100_000, W_raw, W_raw, 0.3, additions="all")
    assert not cut.W[1, 2] and cut.info["dropped_below_threshold"] == 1
    # candidate-only additions cannot add what the consensus never proposed
    assert not polish_graph(G, 100_000, W_raw, W_raw, None, additions="consensus").W.any()


def test_non_private_stage_requests_every_pair_and_private_only_the_selected():
    from bnsl_cli.federated.polish import PolishStage

    d = 6
    W_raw = np.zeros((d, d))
    W_raw[0, 1] = 0.8
    full = GramRequest.decode(PolishStage(0.3, 1000).request(W_raw, 3))
    assert full.pairs.size == d * (d + 1) // 2
    sel = GramRequest.decode(PolishStage(0.3, 1000, noise=(1.0, 1.5, 2)).request(W_raw, 3))
    assert sel.pairs.size < full.pairs.size
    assert PolishStage(0.3, 1000, noise=(1.0, 1.5, 2)).final_threshold == 0.3
    assert PolishStage(0.3, 1000).final_threshold is None


def test_learn_keeps_a_weak_edge_unless_the_threshold_is_given():
    from bnsl_cli.io.table import Table
    from bnsl_cli.simulate import simulate_sem

    W = np.zeros((6, 6))
    W[0, 1], W[1, 2], W[2, 3], W[3, 4], W[0, 5] = 1.0, -0.8, 0.22, 1.2, 0.9
    X = simulate_sem(W, 16_000, rng=np.random.default_rng(5))
    tables = [Table(X[k::4], tuple(f"x{j}" for j in range(6)), f"p{k}") for k in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = learn(tables, LearnConfig(seed=0))
        given = learn(tables, LearnConfig(seed=0, threshold=0.3))
    assert default.report["polish"]["threshold"] is None
    assert structure_metrics(default.W, W)["shd"] == 0
    assert abs(default.W[2, 3]) == pytest.approx(0.22, abs=0.05)
    assert given.report["polish"]["threshold"] == 0.3
    assert not given.W[2, 3]


def test_extended_bic_keeps_spurious_additions_out_when_every_pair_is_open():
    """Independent columns: with ~d² pairs open to an addition the plain BIC admits chance edges,
    the extended BIC (log(n)/2 + log d per edge) almost never does."""
    from bnsl_cli.solvers.score_search import ebic_penalty, score_search

    rng = np.random.default_rng(12)
    n, d = 2000, 60
    X = rng.normal(size=(n, d))
    G = X.T @ X / n
    empty = np.zeros((d, d), dtype=bool)
    E_bic, _ = score_search(G, n, empty, None, "node")
    E_ebic, _ = score_search(G, n, empty, None, "node", penalty=ebic_penalty(n, d))
    assert E_bic.sum() >= 3
    assert E_ebic.sum() <= 1
    zero = np.zeros((d, d))
    assert polish_graph(G, n, zero, zero, None, additions="all").info["penalty_per_edge"] == pytest.approx(
        ebic_penalty(n, d)
    )
