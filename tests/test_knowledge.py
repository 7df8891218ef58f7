"""Prior knowledge (issue 21 item 2): parsing, contradictions, the masks, the plan, and every
method honouring one forbidden mask and one required mask."""

import json
import warnings

import numpy as np
import pytest

from bnsl_cli.errors import OptionError
from bnsl_cli.knowledge import KnowledgeSource, Rule, read_arc_file, read_knowledge_file
from bnsl_cli.learn import DPConfig, LearnConfig, learn
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from tests._sim import simulated_tables

NAMES = ("age", "sex", "bp", "chol", "hr")


def _src(**kw):
    return KnowledgeSource.from_options(**kw)


# ----------------------------------------------------------------------------------------------
# parsing and contradictions
# ----------------------------------------------------------------------------------------------


def test_knowledge_file_parses_required_forbidden_and_tiers(tmp_path):
    f = tmp_path / "k.txt"
    f.write_text(
        "# what we know\n"
        "require age -> bp   # a comment after\n"
        "forbid bp->age\n"
        "\n"
        "tier 1: age sex\n"
        "tier 2: bp chol hr\n"
    )
    k = _src(files=[f]).resolve(NAMES)
    assert k.required == ((0, 2),)
    assert k.forbidden == ((2, 0),)
    assert k.tiers == ((0, 1), (2, 3, 4))
    F, R = k.forbidden_mask(), k.required_mask()
    assert F.shape == (5, 5) and F.dtype == bool
    assert np.all(np.diag(F))
    # no edge from a later tier into an earlier one; within a tier and forwards allowed
    for i in (2, 3, 4):
        for j in (0, 1):
            assert F[i, j]
    assert not F[0, 2] and not F[0, 1] and not F[2, 3]
    assert R[0, 2] and R.sum() == 1


def test_command_line_edges_and_bnlearn_lists(tmp_path):
    wl = tmp_path / "white.csv"
    wl.write_text("from,to\nsex,chol\n")
    bl = tmp_path / "black.csv"
    bl.write_text('"from","to"\nhr,sex\nhr,age\n')
    k = _src(require=["age->bp"], forbid=["chol -> hr"], require_files=[wl], forbid_files=[bl]).resolve(NAMES)
    assert set(k.required) == {(0, 2), (1, 3)}
    assert set(k.forbidden) == {(3, 4), (4, 1), (4, 0)}
    assert _src() is None


@pytest.mark.parametrize(
    "kw, text, needle",
    [
        ({"require": ["age->bp", "bp->chol", "chol->age"]}, None, "form a cycle age -> bp -> chol -> age"),
        ({"require": ["age->bp"], "forbid": ["age->bp"]}, None, "age -> bp is required but also forbidden"),
        ({"require": ["age->weight"]}, None, "unknown variable 'weight'"),
        ({"require": ["age->age"]}, None, "self-loop"),
        ({}, "tier 1: bp\ntier 2: age\nrequire age -> bp\n", "k.txt:3: the required edge age -> bp points from tier 2"),
        ({}, "tier 1: age\ntier 2: age\n", "k.txt:2: age is already in tier 1"),
        ({}, "require age\n", "k.txt:1: expected an edge 'A->B'"),
        ({}, "tier x: age\n", "k.txt:1: expected 'tier N: name name ...'"),
        ({}, "need age -> bp\n", "k.txt:1: unknown statement 'need'"),
        ({}, "forbid bp -> nobody\n", "k.txt:1: unknown variable 'nobody'"),
    ],
)
def test_contradictions_are_one_line_option_errors(tmp_path, kw, text, needle):
    if text is not None:
        f = tmp_path / "k.txt"
        f.write_text(text)
        kw = {"files": [f]}
    with pytest.raises(OptionError) as e:
        _src(**kw).resolve(NAMES)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_arc_file_names_the_line(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("a,b\nage,bp\n")
    with pytest.raises(OptionError, match=r"w.csv:1: expected the header 'from,to'"):
        read_arc_file(f, "require")
    f.write_text("from,to\nage\n")
    with pytest.raises(OptionError, match=r"w.csv:2: expected two names"):
        read_arc_file(f, "forbid")
    with pytest.raises(OptionError, match="cannot read"):
        read_knowledge_file(tmp_path / "missing.txt")


def test_plan_round_trip_with_knowledge():
    sim, tables = simulated_tables(5, 2, 50, 1)
    names = tuple(sim.names)
    src = _src(require=[f"{names[0]}->{names[1]}"], forbid=[f"{names[3]}->{names[2]}"])
    plan = RunPlan.resolve(LearnConfig(knowledge=src), Shapes.of_tables(tables))
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["knowledge"] == {"required": [[names[0], names[1]]], "forbidden": [[names[3], names[2]]], "tiers": []}
    back = RunPlan.from_dict(d)
    assert back == plan
    assert np.array_equal(back.forbidden_mask(), plan.forbidden_mask())
    # a plan without knowledge carries no knowledge key (its bytes are unchanged)
    plain = RunPlan.resolve(LearnConfig(), Shapes.of_tables(tables))
    assert "knowledge" not in plain.to_dict()
    assert RunPlan.from_dict(plain.to_dict()).knowledge is None
    # a received plan is checked again: a contradiction in it is refused
    d["knowledge"]["forbidden"].append([names[0], names[1]])
    with pytest.raises(OptionError, match="required but also forbidden"):
        RunPlan.from_dict(d)


# ----------------------------------------------------------------------------------------------
# every method honours the knowledge
# ----------------------------------------------------------------------------------------------


def _topo_order(W):
    A = W != 0
    order, left = [], set(range(A.shape[0]))
    while left:
        for j in sorted(left):
            if not any(A[i, j] for i in left):
                order.append(j)
                left.discard(j)
                break
    return order


@pytest.fixture(scope="module")
def case():
    """Simulated data and a knowledge set: forbid a strong true edge, require a non-edge that keeps
    the truth acyclic, put one node with true parents alone in tier 1 (so it must end with none)."""
    sim, tables = simulated_tables(8, 3, 700, 11)
    T = sim.W
    names = list(sim.names)
    order = _topo_order(T)
    pos = {v: k for k, v in enumerate(order)}
    # the tier-1 node: the last one in topological order that has parents
    t = max((j for j in range(8) if (T[:, j] != 0).any()), key=lambda j: pos[j])
    ti, tj = np.unravel_index(np.argmax(np.abs(T) * (np.arange(8)[None, :] != t)), T.shape)
    forbidden = (int(ti), int(tj))
    required = next(
        (i, j) for i in order for j in order
        if pos[i] < pos[j] and T[i, j] == 0 and T[j, i] == 0 and j != t and i != t and (i, j) != forbidden
    )
    src = _src(
        require=[f"{names[required[0]]}->{names[required[1]]}"],
        forbid=[f"{names[forbidden[0]]}->{names[forbidden[1]]}"],
    )
    tiers = KnowledgeSource(
        src.rules
        + (Rule("tier", "test", level=1, names=(names[t],)),
           Rule("tier", "test", level=2, names=tuple(n for k, n in enumerate(names) if k != t)))
    )
    return sim, tables, tiers, forbidden, required, t


METHOD_CASES = [
    ("fed-sparse", None),
    ("fed-sparse", 200.0),
    ("fed-bnsl", None),
    ("fed-moments", None),
    ("notears", None),
    ("local-notears", None),
    ("fed-suffstats", None),
    ("fed-suffstats", 200.0),
]


# the private cases are heavy end-to-end private runs (slow); the same method's non-private case is fast
@pytest.mark.parametrize(
    "method, eps",
    [pytest.param(m, e, marks=pytest.mark.slow) if e else (m, e) for m, e in METHOD_CASES],
    ids=[m + ("-dp" if e else "") for m, e in METHOD_CASES],
)
def test_every_method_honours_forbidden_required_and_tiers(case, method, eps):
    sim, tables, src, forbidden, required, t = case
    assert sim.W[forbidden] != 0 and sim.W[required] == 0 and (sim.W[:, t] != 0).any()
    dp = DPConfig(epsilon=eps) if eps else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = learn(tables, LearnConfig(method=method, seed=0, dp=dp))
        res = learn(tables, LearnConfig(method=method, seed=0, dp=dp, knowledge=src))
    graphs = res.local if res.local is not None else [res.W]
    plain_graphs = plain.local if plain.local is not None else [plain.W]
    # the knowledge changes something the method would otherwise output
    assert any(g[forbidden] != 0 or g[required] == 0 or (g[:, t] != 0).any() for g in plain_graphs)
    for W in graphs:
        assert W[forbidden] == 0, "a forbidden true edge appeared"
        assert W[required] != 0, "a required edge is missing"
        assert not (W[:, t] != 0).any(), "an edge from tier 2 into tier 1"
        assert np.all(np.diag(W) == 0)
    # the solver itself honoured the forbidden mask (not only the finishing step)
    if res.W_raw is not None:
        F = src.resolve(sim.names).forbidden_mask()
        assert np.all(res.W_raw[F] == 0)
    k = res.report["knowledge"]
    assert k["required_count"] == 1 and k["forbidden_count"] == 1 and k["tier_count"] == 2
    assert k["forbidden_in_graph"] == 0 and k["required_missing"] == []
    assert k["required"] == [[sim.names[required[0]], sim.names[required[1]]]]


def test_without_knowledge_the_report_has_no_knowledge_entry(case):
    _, tables, *_ = case
    res = learn(tables, LearnConfig(method="notears"))
    assert "knowledge" not in res.report


# ----------------------------------------------------------------------------------------------
# the solvers one by one: each must apply the mask itself (a solver ignoring it fails here)
# ----------------------------------------------------------------------------------------------


def _moments(seed=0, d=6, n=400):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X[:, 1] += 1.5 * X[:, 0]
    X[:, 2] += -1.2 * X[:, 1] + 0.8 * X[:, 0]
    X[:, 4] += 1.0 * X[:, 3]
    X -= X.mean(axis=0)
    return X, X.T @ X / n


def test_pgcd_never_moves_a_forbidden_coordinate():
    from bnsl_cli.solvers.pgcd import pgcd

    X, S = _moments()
    d = S.shape[0]
    F = np.zeros((d, d), bool)
    F[0, 1] = F[1, 2] = F[:, 5] = True
    z = np.zeros((d, d))
    free = pgcd(S, z, z, z, 1e-3, 0.01, 200)
    assert free.B[0, 1] != 0 and free.B[1, 2] != 0
    res = pgcd(S, z, z, z, 1e-3, 0.01, 200, forbidden=F)
    assert np.all(res.B[F] == 0) and not res.changed[F].any()
    assert np.count_nonzero(res.B) > 0
    # a required coordinate carries no ℓ1: a huge λ leaves only it
    R = np.zeros((d, d), bool)
    R[0, 1] = True
    big = pgcd(S, z, z, z, 1e-3, 100.0, 200, required=R)
    assert big.B[0, 1] != 0 and np.count_nonzero(big.B) == 1


def test_dp_pgcd_selects_only_allowed_coordinates_with_the_same_ledger():
    from bnsl_cli.solvers.dp_pgcd import ClippedGradients, dp_pgcd

    X, S = _moments(1)
    d = S.shape[0]
    F = np.zeros((d, d), bool)
    F[:3, :3] = True  # including the strongest pairs
    F[:, 4] = True  # a column masked whole (a variable with no allowed parent)
    m_hat = np.diag(S).copy()
    levels = np.full(d, 3.0)
    z = np.zeros((d, d))
    runs = {}
    for name, mask in (("free", None), ("masked", F)):
        grads = ClippedGradients(X, "double")
        grads.set_B(z)
        runs[name] = dp_pgcd(
            grads, levels, z, z, z, 1e-3, 0.001, m_hat, 300, X.shape[0], 0.05, 0.05,
            np.random.default_rng(3), forbidden=mask,
        )
    B_free, ev_free = runs["free"]
    B, ev = runs["masked"]
    assert np.any(B_free[F] != 0)  # the mask matters at this noise level
    assert np.all(B[F] == 0) and np.count_nonzero(B) > 0
    def sel(events):
        return [(e.sensitivity, e.noise_scale, e.count) for e in events if e.release.name == "SELECTION"]

    # the selection runs over the allowed set with the same score sensitivity and Gumbel scale
    assert sel(ev) == sel(ev_free) and len(sel(ev)) == 1
    # every update: the same per-row sensitivity and noise as without the mask, one per step
    per_row = {round(e.sensitivity, 15): e.noise_scale for e in ev_free if e.release.name != "SELECTION"}
    for e in ev:
        if e.release.name != "SELECTION":
            assert per_row.get(round(e.sensitivity, 15), e.noise_scale) == e.noise_scale
    assert sum(e.count for e in ev if e.release.name != "SELECTION") == 300


def test_notears_fixes_forbidden_entries_and_spares_required_ones():
    from bnsl_cli.solvers.notears import notears_linear

    _, S = _moments(2)
    d = S.shape[0]
    F = np.zeros((d, d), bool)
    F[0, 1] = F[1, 0] = True
    R = np.zeros((d, d), bool)
    R[3, 5] = True
    free = notears_linear(S, 0.1)
    assert abs(free.W[0, 1]) + abs(free.W[1, 0]) > 0.3
    res = notears_linear(S, 0.1, forbidden=F, required=R)
    assert np.all(res.W[F] == 0)
    assert res.W[3, 5] != 0  # unpenalised: its (small) least-squares value, not 0
    assert free.W[3, 5] == 0 or abs(free.W[3, 5]) < abs(res.W[3, 5]) + 1e-12


def test_coordinator_w_step_keeps_forbidden_at_zero_and_required_unsnapped():
    from bnsl_cli.federated.methods.admm.coordinator import Coordinator

    d, P = 4, 2
    for dense in (False, True):
        c = Coordinator(d, P, snap=0.05, l1=0.01 if dense else 0.0, dense=dense)
        c.B[:] = 0.0
        c.B[:, 0, 1] = 0.8  # strong, forbidden
        c.B[:, 2, 3] = 0.02  # weak, required (below the snap)
        c.forbidden = np.zeros((d, d), bool)
        c.forbidden[0, 1] = True
        c.required = np.zeros((d, d), bool)
        c.required[2, 3] = True
        c.step()
        assert c.W[0, 1] == 0.0
        assert c.W[2, 3] != 0.0


def test_polish_search_never_adds_forbidden_and_keeps_required():
    from bnsl_cli.solvers.score_search import polish_graph

    X, S = _moments(3)
    d = S.shape[0]
    names = tuple(f"x{k}" for k in range(d))
    k = KnowledgeSource.from_options(require=["x3->x5"], forbid=["x0->x1", "x1->x0"]).resolve(names)
    W0 = np.zeros((d, d))
    free = polish_graph(S, X.shape[0], W0, W0, None, additions="all")
    assert free.W[0, 1] != 0 or free.W[1, 0] != 0
    res = polish_graph(S, X.shape[0], W0, W0, None, additions="all", knowledge=k)
    assert res.W[0, 1] == 0 and res.W[1, 0] == 0
    assert res.W[3, 5] != 0  # kept and fitted (least squares) although the score would drop it
    assert free.W[3, 5] == 0


def test_finish_step_keeps_required_and_fits_a_zero_one():
    from bnsl_cli.dag import finish_graph, fit_required

    _, S = _moments(4)
    d = S.shape[0]
    names = tuple(f"x{k}" for k in range(d))
    k = KnowledgeSource.from_options(require=["x3->x5", "x0->x1"], forbid=["x1->x2"]).resolve(names)
    W_raw = np.zeros((d, d))
    W_raw[0, 1] = 0.1  # below the threshold but required
    W_raw[1, 2] = -1.0  # forbidden
    W_raw[0, 2] = 0.9
    W, removed = finish_graph(W_raw, 0.3, "test", names, k)
    assert W[0, 1] == 0.1 and W[1, 2] == 0 and W[0, 2] == 0.9 and W[3, 5] == 0
    W2 = fit_required(W, S, k)
    assert W2[3, 5] != 0 and W2[0, 1] == 0.1  # only the children of unfitted edges are refitted


def test_noise_aware_search_keeps_to_the_masks():
    from bnsl_cli.solvers.moment_search import learn_from_moments

    X, S = _moments(5)
    d = S.shape[0]
    names = tuple(f"x{k}" for k in range(d))
    k = KnowledgeSource.from_options(require=["x3->x5"], forbid=["x0->x1", "x1->x0"]).resolve(names)
    free = learn_from_moments(S, X.shape[0])
    assert free.E[0, 1] or free.E[1, 0]
    assert not free.E[3, 5]
    res = learn_from_moments(S, X.shape[0], knowledge=k)
    assert not res.E[0, 1] and not res.E[1, 0]
    assert res.E[3, 5] and res.W[3, 5] != 0
