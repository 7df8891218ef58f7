"""--standardize keeps the Markov equivalence class the raw run finds.

Standardised columns carry no variance signal for the equal-variance score, and the consensus learned
on them starts the polish among wrongly oriented edges. Before the fix the polish's greedy searches
stayed there: ``bnsl simulate -d 10 -e 10 -p 3 -n 2000 --seed 4`` gave SHD 0 raw and SHD 9 (5 extra
edges, CPDAG-SHD 9) with --standardize. The polish of standardised moments now scores with the
per-node score and adds an order search (bnsl_cli.solvers.order_search)."""

import warnings

import numpy as np
import pytest

from bnsl_cli.federated.polish import PolishStage
from bnsl_cli.io.table import Table
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.metrics import cpdag_shd, structure_metrics
from bnsl_cli.simulate import simulate
from bnsl_cli.solvers.gaussian_score import bic_of, ebic_penalty
from bnsl_cli.solvers.local_score import GaussianScore, LocalScore
from bnsl_cli.solvers.order_search import OrderScores, order_search, topological_order
from bnsl_cli.solvers.score_search import polish_graph


def _case(d, e, P, n, seed, **kw):
    """The data of ``bnsl simulate -d d -e e -p P -n n --seed seed`` (same generator, same draws)."""
    sim = simulate(d, e, participants=P, samples=n, seed=seed, **kw)
    return sim, [Table(X, tuple(sim.names), f"p{k}") for k, X in enumerate(sim.shards)]


def _learn(tables, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return learn(tables, LearnConfig(**kw))


@pytest.fixture(scope="module")
def seed4():
    sim, tables = _case(10, 10, 3, 2000, 4)
    return sim, tables, _learn(tables), _learn(tables, standardize=True)


def test_seed4_standardize_keeps_the_equivalence_class(seed4):
    sim, _, raw, std = seed4
    truth = sim.W != 0
    m_raw = structure_metrics(raw.W, sim.W)
    m_std = structure_metrics(std.W, sim.W)
    assert m_raw["shd"] == 0  # the raw run, unchanged by the fix
    # equal noise variances: the orientation within the class may differ, the class may not
    assert cpdag_shd(std.W != 0, truth) <= cpdag_shd(raw.W != 0, truth) + 1, m_std
    assert m_std["extra"] <= 1 and m_std["missing"] == 0, m_std  # was 5 extra edges
    assert m_std["shd_skeleton"] <= 1, m_std


def test_seed4_polish_report_names_the_standardised_search(seed4):
    _, _, raw, std = seed4
    p_std, p_raw = std.report["polish"], raw.report["polish"]
    assert "order search" in p_std["score"] and set(p_std["bic"]) == {"node"}
    assert "order search" not in p_raw["score"] and set(p_raw["bic"]) == {"equal", "node"}  # raw: "auto" as before


def test_denser_graph_standardized_within_one_of_raw():
    # ER2, d = 20: SHD 91 (CPDAG-SHD 93) with --standardize before the fix, raw SHD 0
    sim, tables = _case(20, 40, 5, 2000, 4)
    truth = sim.W != 0
    raw, std = _learn(tables), _learn(tables, standardize=True)
    assert cpdag_shd(std.W != 0, truth) <= cpdag_shd(raw.W != 0, truth) + 1
    assert structure_metrics(std.W, sim.W)["shd_skeleton"] <= structure_metrics(raw.W, sim.W)["shd_skeleton"] + 1


@pytest.mark.parametrize("factors", [
    [1e3, 1, 1e-3, 1, 1, 1e3, 1, 1e-3, 1, 1],
    [1e-3, 1e-3, 1, 1e3, 1e3, 1, 1, 1, 1e3, 1e-3],
])
def test_rescaled_columns_give_the_same_standardized_graph(seed4, factors):
    sim, tables, _, std = seed4
    f = np.asarray(factors)
    scaled = [Table(t.X * f, t.names, t.path) for t in tables]
    r = _learn(scaled, standardize=True)
    truth = sim.W != 0
    assert structure_metrics(r.W != 0, std.W != 0)["shd"] <= 1  # the units barely move the graph
    assert cpdag_shd(r.W != 0, truth) <= 1  # and it is the right class (CPDAG-SHD 9 before the fix)
    # weights in original units: W[i, j] scales with f_j / f_i
    both = (r.W != 0) & (std.W != 0)
    np.testing.assert_allclose(r.W[both], (std.W * (f[None, :] / f[:, None]))[both], rtol=1e-3)


# ------------------------------------------------------------------------------------------------
# the order search itself
# ------------------------------------------------------------------------------------------------


def _standardized_population(W, noise_sd):
    """Population correlation matrix of x = x W + e with noise sds ``noise_sd``."""
    d = W.shape[0]
    A = np.linalg.inv(np.eye(d) - W)
    S = A.T @ np.diag(np.asarray(noise_sd, float) ** 2) @ A
    s = np.sqrt(np.diag(S))
    return S / np.outer(s, s)


def _chain_with_colliders():
    # 0 → 1 → 2 → 3, 4 → 2 (a collider at 2), 1 → 5, 3 → 5, 0 → 6
    W = np.zeros((7, 7))
    for (i, j), w in {(0, 1): 1.5, (1, 2): -1.2, (2, 3): 1.8, (4, 2): 0.9, (1, 5): 0.8, (3, 5): -1.1, (0, 6): 1.3}.items():
        W[i, j] = w
    return W


def test_order_search_reaches_the_class_from_a_wrong_order():
    W = _chain_with_colliders()
    G = _standardized_population(W, [1.0, 0.5, 1.0, 0.7, 1.2, 0.6, 1.0])
    n = 5000
    pen = ebic_penalty(n, 7)
    truth = W != 0
    score = GaussianScore(G, n, pen)
    scores = OrderScores(score)
    start = [6, 2, 5, 3, 0, 1, 4]  # 4 (a root) last, colliders before their parents
    E, order = order_search(score, start, scores=scores)
    assert cpdag_shd(E, truth) == 0
    assert sorted(order) == list(range(7))
    # the per-node score cannot tell members of the class apart
    assert abs(bic_of(G, n, E, "node", pen) - bic_of(G, n, truth, "node", pen)) < 1e-6
    # from any start the search ends no worse than it began (the reverse order: a local optimum)
    for start in (list(range(7)), list(range(7))[::-1], topological_order(truth)[::-1]):
        cost0 = sum(f.cost for f in scores.families(start))
        _, end = order_search(score, start, scores=scores)
        assert sum(f.cost for f in scores.families(end)) <= cost0


def test_order_search_shortcuts_match_fresh_fits():
    # a family taken over from a neighbouring mask must be the one a fit would find, to the bit
    rng = np.random.default_rng(0)
    W = _chain_with_colliders()
    G = _standardized_population(W, [1.0, 0.5, 1.0, 0.7, 1.2, 0.6, 1.0])
    cached = OrderScores(GaussianScore(G, 3000, ebic_penalty(3000, 7)))
    for _ in range(200):
        j = int(rng.integers(7))
        v = int(rng.integers(7))
        mask = int(rng.integers(1 << 7)) & ~(1 << j) & ~(1 << v)
        base = cached.family(j, mask)
        for got, m in ((cached.joined(j, mask, base, v), mask | (1 << v)),
                       (cached.left(j, mask | (1 << v), cached.family(j, mask | (1 << v)), v), mask)):
            fresh = OrderScores(GaussianScore(G, 3000, ebic_penalty(3000, 7))).family(j, m)
            assert got.parents == fresh.parents and got.cost == fresh.cost


def test_order_search_honours_knowledge():
    W = _chain_with_colliders()
    G = _standardized_population(W, [1.0] * 7)
    n, pen = 5000, ebic_penalty(5000, 7)
    forbidden = np.zeros((7, 7), dtype=bool)
    forbidden[1, 2] = forbidden[2, 1] = True
    required = np.zeros((7, 7), dtype=bool)
    required[4, 6] = True  # absent from the truth
    E, order = order_search(GaussianScore(G, n, pen), list(range(7)), forbidden, required)
    assert E[4, 6] and not E[1, 2] and not E[2, 1]
    assert order.index(4) < order.index(6)
    # a start that puts a required edge's child first has no finite cost
    assert order_search(GaussianScore(G, n, pen), [6, 0, 1, 2, 3, 4, 5], forbidden, required) is None


class _CostOnly(LocalScore):
    """The Gaussian score through ``cost`` alone: the searches must find the same graph from the
    generic ``step`` (any score without closed forms, a categorical one, goes this way)."""

    def __init__(self, G, n, pen):
        self.inner = GaussianScore(G, n, pen)
        self.d = self.inner.d
        self.calls = 0

    def cost(self, j, parents):
        self.calls += 1
        return self.inner.cost(j, parents)


@pytest.mark.parametrize("start", [[6, 2, 5, 3, 0, 1, 4], list(range(7)), list(range(7))[::-1]])
def test_a_score_with_only_costs_drives_the_order_search_to_the_same_graph(start):
    W = _chain_with_colliders()
    G = _standardized_population(W, [1.0, 0.5, 1.0, 0.7, 1.2, 0.6, 1.0])
    n, pen = 5000, ebic_penalty(5000, 7)
    generic = _CostOnly(G, n, pen)
    with np.errstate(all="ignore"):
        E1, order1 = order_search(GaussianScore(G, n, pen), start)
        E2, order2 = order_search(generic, start)
    assert generic.calls > 0
    assert np.array_equal(E1, E2) and cpdag_shd(E2, W != 0) == cpdag_shd(E1, W != 0)


def test_the_generic_step_is_the_closed_forms():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 6)) @ rng.normal(size=(6, 6))
    G = X.T @ X / 400
    closed, generic = GaussianScore(G, 400, 3.0), _CostOnly(G, 400, 3.0)
    for j, S in ((0, ()), (2, (0, 4)), (5, (1, 2, 3))):
        with np.errstate(all="ignore"):
            c1, g1, d1 = closed.step(j, S)
            c2, g2, d2 = LocalScore.step(generic, j, S)
        assert c1 == c2
        np.testing.assert_allclose(g2, g1, rtol=1e-9, atol=1e-9)
        if S:
            np.testing.assert_allclose(d2, d1, rtol=1e-9, atol=1e-9)


def test_polish_of_standardized_moments_leaves_a_wrong_consensus():
    # the consensus of the equal-variance loss on standardised data: collider parents on the child
    W = _chain_with_colliders()
    G = _standardized_population(W, [1.0] * 7)
    W0 = np.zeros((7, 7))
    for i, j in ((0, 1), (1, 3), (3, 2), (4, 3), (2, 5), (3, 5), (6, 0), (4, 5)):
        W0[i, j] = 1.0
    truth = W != 0
    res = polish_graph(G, 5000, W0, W0, None, score="node", additions="all", orders=True)
    assert cpdag_shd(res.W != 0, truth) == 0, res.info
    with pytest.raises(ValueError):
        polish_graph(G, 5000, W0, W0, None, score="auto", additions="all", orders=True)


def test_raw_polish_stage_is_unchanged():
    # without --standardize (or under --dp) the polish keeps its "auto" score and no order search
    assert not PolishStage(0.3, 1000).orders and PolishStage(0.3, 1000).score == "auto"
    assert not PolishStage(0.3, 1000, noise=(1.0, 1.5, 3), standardized=True).orders
    std = PolishStage(0.3, 1000, standardized=True)
    assert std.orders and std.score == "node"
