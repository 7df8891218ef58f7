"""Categorical and mixed columns (issue 42, first part: non-private, in one process): column kinds, the
indicator expansion, the degenerate Gaussian score and its search, the CLI's reading and refusals."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bnsl_cli.errors import IdentifierColumnWarning, InputDataError, OptionError
from bnsl_cli.column_kinds import ColumnKinds
from bnsl_cli.io.kinds import encode
from bnsl_cli.io.table import Table
from bnsl_cli.learn import learn
from bnsl_cli.metrics import structure_metrics
from bnsl_cli.plan.options import LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.simulate_mixed import simulate_mixed
from bnsl_cli.solvers.mixed_score import MixedGaussianScore, mixed_graph
from tests._cli import run


def _tables(sim, sites=None):
    cat = list(sim.levels)
    out = []
    for k, shard in enumerate(sim.shards[:sites]):
        cont = [n for n in sim.names if n not in cat]
        X = np.column_stack([shard[n] for n in cont]) if cont else np.zeros((len(shard[sim.names[0]]), 0))
        out.append(Table(X, tuple(cont), f"site{k + 1}.csv", extra={n: shard[n] for n in cat}))
    return out, cat


def _write(tmp_path, sim, sites=None):
    paths = []
    for k, shard in enumerate(sim.shards[:sites]):
        p = tmp_path / f"site{k + 1}.csv"
        rows = [",".join(sim.names)]
        n = len(shard[sim.names[0]])
        for i in range(n):
            rows.append(",".join(str(shard[c][i]) if c in sim.levels else f"{shard[c][i]:.6f}" for c in sim.names))
        p.write_text("\n".join(rows) + "\n")
        paths.append(p)
    return paths


# ------------------------------------------------------------------------------------------------
# the shape: kinds, levels, expansion
# ------------------------------------------------------------------------------------------------


def test_levels_are_combined_over_sites_and_expanded_in_file_order():
    a = Table(np.array([[1.0], [2.0], [3.0]]), ("x",), "a.csv", extra={"g": np.array(["b", "a", "b"])})
    b = Table(np.array([[4.0], [5.0]]), ("x",), "b.csv", extra={"g": np.array(["c", "a"])})
    (ta, tb), kinds = encode([a, b], ["g"], order=["g", "x"])
    assert kinds.names == ("g", "x") and kinds.categorical == {"g": ("a", "b", "c")}
    assert ta.names == ("g=b", "g=c", "x") and kinds.blocks() == [[0, 1], [2]]
    np.testing.assert_array_equal(ta.X, [[1, 0, 1], [0, 0, 2], [1, 0, 3]])
    np.testing.assert_array_equal(tb.X, [[0, 1, 4], [0, 0, 5]])  # level c: only at b, still a column at a
    assert ColumnKinds.from_dict(json.loads(json.dumps(kinds.to_dict()))) == kinds


def test_too_many_levels_one_level_and_missing_cells_are_refused_naming_the_column():
    ids = Table(np.zeros((30, 1)) + np.arange(30)[:, None], ("x",), "a.csv",
                extra={"id": np.array([f"p{i}" for i in range(30)])})
    with pytest.raises(OptionError, match=r"column 'id' has 30 levels, more than --max-levels 20"):
        encode([ids], ["id"])
    one = Table(np.arange(4.0)[:, None], ("x",), "a.csv", extra={"g": np.array(["k"] * 4)})
    with pytest.raises(InputDataError, match=r"column 'g' has one level \('k'\) in every row"):
        encode([one], ["g"])
    miss = Table(np.arange(4.0)[:, None], ("x",), "a.csv", extra={"g": np.array(["k", "", "m", "k"])})
    with pytest.raises(InputDataError, match=r"a\.csv: column 'g' \(categorical\) has a missing cell in data row 2"):
        encode([miss], ["g"])
    (t,), _ = encode([miss], ["g"], na_drop=True)
    assert t.n == 3 and t.dropped_rows == 1


def test_a_column_that_names_the_site_is_warned_about():
    a = Table(np.arange(5.0)[:, None], ("x",), "a.csv", extra={"clinic": np.array(["c1"] * 5)})
    b = Table(np.arange(5.0)[:, None] * 2, ("x",), "b.csv", extra={"clinic": np.array(["c2"] * 5)})
    with pytest.warns(IdentifierColumnWarning, match="column 'clinic' has no level in common between the sites"):
        encode([a, b], ["clinic"])


# ------------------------------------------------------------------------------------------------
# the score and the search
# ------------------------------------------------------------------------------------------------


def test_the_score_is_unit_free_and_prefers_the_true_parents():
    sim = simulate_mixed(6, 6, share=0.5, participants=1, samples=4000, seed=3)
    (t,), cat = _tables(sim)
    (e,), kinds = encode([t], cat, order=list(sim.names))
    Xc = e.X - e.X.mean(axis=0)
    G = Xc.T @ Xc / e.n
    f = np.exp(np.random.default_rng(0).uniform(-5, 5, e.d))  # any units for every expanded column
    G2 = G * np.outer(f, f)
    s1, s2 = MixedGaussianScore(G, e.n, kinds.blocks()), MixedGaussianScore(G2, e.n, kinds.blocks())
    for j in range(6):
        pa = tuple(int(i) for i in np.flatnonzero(sim.B[:, j]))
        others = tuple(i for i in range(6) if i != j and i not in pa)[:2]
        for P in (pa, others, ()):
            assert s1.cost(j, P) - s1.cost(j, ()) == pytest.approx(s2.cost(j, P) - s2.cost(j, ()), abs=1e-6)
        if pa:
            assert s1.cost(j, pa) < s1.cost(j, ())


def test_an_all_categorical_network_is_recovered_from_the_sites_sums():
    # asia-like: binary variables, a deterministic "either" (tub or lung)
    rng = np.random.default_rng(2)
    tables = []
    for k, n in enumerate((800, 700)):
        A, S = rng.random(n) < 0.3, rng.random(n) < 0.5
        T = np.where(A, rng.random(n) < 0.6, rng.random(n) < 0.1)
        L = np.where(S, rng.random(n) < 0.7, rng.random(n) < 0.1)
        E = T | L
        X = np.where(E, rng.random(n) < 0.9, rng.random(n) < 0.1)
        yes = lambda v: np.where(v, "yes", "no")  # noqa: E731
        tables.append(Table(np.zeros((n, 0)), (), f"s{k}.csv", extra={
            "asia": yes(A), "smoke": yes(S), "tub": yes(T), "lung": yes(L), "either": yes(E), "xray": yes(X)}))
    names = ["asia", "smoke", "tub", "lung", "either", "xray"]
    enc, kinds = encode(tables, names, order=names)
    res = learn(enc, LearnConfig(method="fed-suffstats"))
    truth = np.zeros((6, 6), bool)
    for a, b in (("asia", "tub"), ("smoke", "lung"), ("tub", "either"), ("lung", "either"), ("either", "xray")):
        truth[names.index(a), names.index(b)] = True
    assert res.names == tuple(names)
    assert structure_metrics((res.W != 0).astype(float), truth.astype(float))["shd"] == 0
    assert res.report["columns"]["kinds"] == ["categorical"] * 6


def test_mixed_data_beat_the_same_levels_coded_as_numbers():
    # 3 seeds of a d = 12 mixed SEM: the degenerate Gaussian score against integer codes as continuous columns
    ours, coded = [], []
    for seed in (1, 2, 3):
        sim = simulate_mixed(12, 14, share=0.5, levels=(3, 4), participants=3, samples=1000, seed=seed)
        tables, cat = _tables(sim)
        enc, _ = encode(tables, cat, order=list(sim.names))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours.append(structure_metrics((learn(enc, LearnConfig(method="fed-suffstats")).W != 0).astype(float),
                                          sim.B.astype(float))["shd"])
            num = []
            for t in tables:
                X = np.column_stack([t.X[:, t.names.index(n)] if n in t.names else
                                     np.char.lstrip(np.asarray(t.extra[n], str), "L").astype(float) for n in sim.names])
                num.append(Table(X, tuple(sim.names), t.path))
            coded.append(structure_metrics((learn(num, LearnConfig()).W != 0).astype(float), sim.B.astype(float))["shd"])
    assert np.mean(ours) < np.mean(coded), (ours, coded)


def test_the_search_keeps_to_knowledge_over_the_variables():
    sim = simulate_mixed(6, 6, share=0.5, participants=1, samples=3000, seed=5)
    (t,), cat = _tables(sim)
    (e,), kinds = encode([t], cat, order=list(sim.names))
    Xc = e.X - e.X.mean(axis=0)
    G = Xc.T @ Xc / e.n
    i, j = map(int, np.argwhere(sim.B)[0])
    forbidden = np.zeros((6, 6), bool)
    forbidden[i, j] = forbidden[j, i] = True
    required = np.zeros((6, 6), bool)
    k = next(c for c in range(6) if c not in (i, j) and not sim.B[i, c] and not sim.B[c, i])
    required[i, k] = True
    E = mixed_graph(G, e.n, kinds.blocks(), forbidden, required)
    assert not E[i, j] and not E[j, i] and E[i, k]


# ------------------------------------------------------------------------------------------------
# the plan and the command line
# ------------------------------------------------------------------------------------------------


def test_methods_that_take_continuous_columns_only_refuse_a_categorical_one():
    sim = simulate_mixed(5, 5, share=0.4, participants=2, samples=200, seed=1)
    tables, cat = _tables(sim)
    enc, _ = encode(tables, cat, order=list(sim.names))
    for method in ("fed-sparse", "fed-bnsl", "notears", "local-notears", "fed-moments"):
        with pytest.raises(OptionError, match=rf"column '{cat[0]}' is categorical; --method {method} takes "
                                              r"continuous columns only \(fed-suffstats takes categorical columns\)"):
            RunPlan.resolve(LearnConfig(method=method), Shapes.of_tables(enc))
    with pytest.raises(OptionError, match="--standardize"):
        RunPlan.resolve(LearnConfig(method="fed-suffstats", standardize=True), Shapes.of_tables(enc))
    plan = RunPlan.resolve(LearnConfig(method="fed-suffstats"), Shapes.of_tables(enc))
    assert RunPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert plan.variables == tuple(sim.names) and plan.names == enc[0].names


def test_learn_reads_text_columns_as_categorical_and_writes_the_variables(tmp_path):
    sim = simulate_mixed(6, 6, share=0.5, participants=3, samples=400, seed=4)
    paths = _write(tmp_path, sim)
    out = tmp_path / "run"
    res = run("learn", *paths, "--out", out, "-q")
    assert res.exit_code == 0, res.output
    header = (out / "adjacency.csv").read_text().splitlines()[0].split(",")[1:]
    assert header == list(sim.names)
    report = json.loads((out / "report.json").read_text())
    assert report["method"] == "fed-suffstats"
    assert set(report["columns"]["levels"]) == set(sim.levels)
    edges = (out / "edges.csv").read_text().splitlines()
    assert edges[0] == "source,target,weight,kind" and len(edges) > 1
    for row in edges[1:]:
        src, tgt, w, kind = row.split(",")
        want = f"{'categorical' if src in sim.levels else 'continuous'}->{'categorical' if tgt in sim.levels else 'continuous'}"
        assert kind == want and (kind == "continuous->continuous" or float(w) == 1.0), row
    # nothing of a continuous run changes: the same files without their text columns
    cont = [n for n in sim.names if n not in sim.levels]
    res2 = run("learn", *paths, "--columns", ",".join(cont), "-q")
    assert res2.exit_code == 0 and "fed-suffstats" not in res2.stderr


def test_the_cli_refusals_are_one_line(tmp_path):
    sim = simulate_mixed(5, 5, share=0.4, participants=2, samples=200, seed=2)
    paths = _write(tmp_path, sim)
    cat = next(iter(sim.levels))
    for args, code, text in (
        (("--dp", "--epsilon", "5"), 2, f"column {cat!r} is categorical: under --dp"),
        (("--method", "fed-sparse"), 2, f"column {cat!r} is categorical; --method fed-sparse takes continuous"),
        (("--rounds", "5"), 2, "is the default for data with categorical columns"),
        (("--max-levels", "1"), 2, "--max-levels must be at least 2"),
    ):
        out = tmp_path / "never"
        res = run("learn", *paths, *args, "--out", out)
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert res.exit_code == code and len(lines) == 1 and text in lines[0], res.output
        assert "Traceback" not in res.output and not out.exists()


def test_simulate_categorical_writes_text_columns_that_learn_reads(tmp_path):
    out = tmp_path / "sim"
    res = run("simulate", "-d", 8, "-e", 8, "-p", 3, "-n", 400, "--seed", 2, "--categorical", 0.5, "--out", out, "-q")
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    cats = manifest["truth"]["categorical"]
    assert len(cats) == 4 and all(lv[0] == "L0" for lv in cats.values())
    header = (out / "shards" / "participant-01.csv").read_text().splitlines()[:2]
    cells = dict(zip(header[0].split(","), header[1].split(",")))
    assert all(cells[c].startswith("L") for c in cats)
    again = tmp_path / "again"
    assert run("simulate", "-d", 8, "-e", 8, "-p", 3, "-n", 400, "--seed", 2, "--categorical", 0.5, "--out", again,
               "-q").exit_code == 0
    assert (again / "shards" / "participant-02.csv").read_bytes() == (out / "shards" / "participant-02.csv").read_bytes()
    learned = tmp_path / "run"
    assert run("learn", out / "shards", "-q", "--out", learned).exit_code == 0
    ev = run("evaluate", learned / "adjacency.csv", "--truth", out / "truth.csv", "--json")
    assert ev.exit_code == 0, ev.output
    for bad, msg in ((("--categorical", "1.5"), "--categorical must be a share"), (("--categorical", "0.5", "--levels", "1,3"),
                                                                                    "--levels '1,3'")):
        r = run("simulate", "-d", 5, "-e", 5, "-p", 1, "-n", 50, *bad, "--out", tmp_path / "never")
        assert r.exit_code == 2 and msg in r.stderr and not (tmp_path / "never").exists(), r.output


# ------------------------------------------------------------------------------------------------
# the second phase: contingency tables from the sites, the multinomial BIC
# ------------------------------------------------------------------------------------------------


def _discrete_tables(seed=0, sites=2, n=600):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(sites):
        a = rng.choice(["p", "q", "r"], n)
        b = np.where(a == "p", rng.choice(["x", "y"], n, p=[0.8, 0.2]), rng.choice(["x", "y"], n, p=[0.3, 0.7]))
        c = np.where((a == "q") & (b == "y"), "on", np.where(rng.random(n) < 0.2, "on", "off"))
        out.append(Table(np.zeros((n, 0)), (), f"s{k}.csv", extra={"a": a, "b": b, "c": c}))
    return encode(out, ["a", "b", "c"], order=["a", "b", "c"])


def test_the_table_request_round_trips_and_a_site_counts_its_rows():
    from bnsl_cli.federated.methods.suffstats.messages import TABLE_ROUND, TableRequest
    from bnsl_cli.federated.methods.suffstats.site import make_suffstats_site

    enc, kinds = _discrete_tables()
    plan = RunPlan.resolve(LearnConfig(method="fed-suffstats"), Shapes.of_tables(enc))
    req = TableRequest(TABLE_ROUND, plan.d, 3 * 2 * 2 + 2 * 2, ((0, 1, 2), (1, 2)))
    assert TableRequest.decode(req.encode()) == req
    site = make_suffstats_site(plan, 0, enc[0].X, None)
    from bnsl_cli.federated.methods.suffstats.messages import BasisBroadcast, FirstRequest

    site.handle(FirstRequest(0, plan.d, plan.d).encode())
    with pytest.raises(Exception, match="after the stages"):
        site.handle(req.encode())
    site.handle(BasisBroadcast(1, plan.d, np.zeros(plan.d), np.ones(plan.d), np.eye(plan.d)).encode())
    from bnsl_cli.federated.messages import ShareReply

    vals = ShareReply.decode(site.handle(req.encode())).values * plan.n_total
    assert vals[:12].sum() == pytest.approx(enc[0].n) and vals[12:].sum() == pytest.approx(enc[0].n)
    # the table of (a, b, c) marginalised to (b, c) is the second table
    np.testing.assert_allclose(vals[:12].reshape(3, 2, 2).sum(axis=0).ravel(), vals[12:])
    with pytest.raises(Exception, match="already sent once"):
        site.handle(req.encode())


@pytest.mark.parametrize("groups, count, why", [
    (((0, 0),), 9, "distinct"),
    (((0,),), 3, "2 to"),
    (((0, 1),), 7, "values for 6 cells"),
    (((0, 5),), 6, "not one of the plan's categorical columns"),
])
def test_a_site_refuses_a_bad_table_request_before_counting(groups, count, why):
    from bnsl_cli.federated.methods.suffstats.messages import TABLE_ROUND, TableRequest
    from bnsl_cli.federated.methods.suffstats.sequence import table_request_problem

    enc, _ = _discrete_tables()
    plan = RunPlan.resolve(LearnConfig(method="fed-suffstats"), Shapes.of_tables(enc))
    assert why in table_request_problem(TableRequest(TABLE_ROUND, plan.d, count, groups), plan)
    cont = RunPlan.resolve(LearnConfig(method="fed-suffstats"), Shapes.of_tables(
        [Table(np.random.default_rng(0).normal(size=(50, 3)), ("x", "y", "z"), "t.csv")]))
    assert "without categorical columns" in table_request_problem(TableRequest(TABLE_ROUND, cont.d, 4, ((0, 1),)), cont)


def test_the_multinomial_cost_is_the_bic_of_the_counts():
    from bnsl_cli.solvers.discrete_score import multinomial_cost

    rng = np.random.default_rng(1)
    T = rng.integers(0, 30, size=(3, 2, 4)).astype(float)  # axes: a, b, c
    n = T.sum()
    # c given a: counts N[a, c]
    N = T.sum(axis=1)
    ll = sum(N[i, k] * np.log(N[i, k] / N[i].sum()) for i in range(3) for k in range(4) if N[i, k] > 0)
    assert multinomial_cost(T, 2, [0], n) == pytest.approx(-ll + np.log(n) / 2 * 3 * 3)
    # b alone
    Nb = T.sum(axis=(0, 2))
    llb = sum(v * np.log(v / n) for v in Nb if v > 0)
    assert multinomial_cost(T, 1, [], n) == pytest.approx(-llb + np.log(n) / 2 * 1)


def test_the_second_phase_runs_and_keeps_to_the_tables_parents():
    enc, kinds = _discrete_tables(seed=3, sites=3, n=800)
    res = learn(enc, LearnConfig(method="fed-suffstats"))
    note = res.report["history"][-1]["note"]
    assert "second phase: the multinomial BIC of" in note, note
    # a → b, a → c, b → c (c depends on a and b together)
    skel = (res.W != 0) | (res.W != 0).T
    assert skel[0, 1] and skel[0, 2] and skel[1, 2]


def test_graph_dot_draws_categorical_nodes_as_boxes_and_reads_back(tmp_path):
    sim = simulate_mixed(6, 6, share=0.5, participants=2, samples=400, seed=4)
    paths = _write(tmp_path, sim)
    out = tmp_path / "run"
    assert run("learn", *paths, "--out", out, "-q").exit_code == 0
    dot = (out / "graph.dot").read_text()
    for name, lv in sim.levels.items():
        assert f'{name} [shape=box, levels={len(lv)}, xlabel="{len(lv)} levels"];' in dot
    ev = run("evaluate", out / "graph.dot", "--truth", out / "adjacency.csv", "--json")
    assert ev.exit_code == 0 and json.loads(ev.stdout)[0]["shd"] == 0, ev.output


def test_a_text_index_column_is_not_categorical(tmp_path):
    rng = np.random.default_rng(6)
    paths = []
    for k in range(2):
        a = rng.normal(size=150)
        b = a + rng.normal(size=150)
        c = np.where(b > 0, "hi", "lo")
        p = tmp_path / f"s{k}.csv"
        p.write_text("pid,a,b,c\n" + "".join(f"p{k}{i:04d},{a[i]:.5f},{b[i]:.5f},{c[i]}\n" for i in range(150)))
        paths.append(p)
    res = run("learn", *paths, "--index-col", "pid", "-q")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "source,target,weight,kind" and "pid" not in res.stdout
    res = run("learn", *paths, "--index-col", "pid", "--drop", "c", "--dp", "--epsilon", 5, "-q")
    assert res.exit_code == 0, res.output


def test_a_plan_without_tables_is_answered_no_table_and_runs_the_first_phase_only():
    """``RunPlan.tables`` (a networked run where a site did not pass ``--allow-tables``): every site refuses a
    table request on that public value, and the driver asks for none; the plan carries it over the wire."""
    from dataclasses import replace

    from bnsl_cli.federated.methods.suffstats.messages import TABLE_ROUND, TableRequest
    from bnsl_cli.federated.methods.suffstats.sequence import table_request_problem

    enc, kinds = _discrete_tables()
    plan = RunPlan.resolve(LearnConfig(method="fed-suffstats"), Shapes.of_tables(enc))
    req = TableRequest(TABLE_ROUND, plan.d, 12, ((0, 1, 2),))
    assert plan.tables and table_request_problem(req, plan) is None
    closed = replace(plan, tables=False)
    assert "without tables" in table_request_problem(req, closed)
    assert RunPlan.from_dict(closed.to_dict()).tables is False and RunPlan.from_dict(plan.to_dict()).tables is True
    seeded = replace(plan, seed=1)
    with_tables, without = learn(enc, seeded), learn(enc, replace(seeded, tables=False))
    assert with_tables.report["communication"]["exchanges"] == without.report["communication"]["exchanges"] + 1
    assert "second phase: the multinomial BIC" in with_tables.report["history"][-1]["note"]
    assert "no second phase: a site did not allow contingency tables" in without.report["history"][-1]["note"]
