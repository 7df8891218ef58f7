"""`bnsl refit` driven through the real Typer app."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.io.graphs import write_adjacency_csv, write_edges_csv
from bnsl_cli.simulate import simulate
from tests._cli import run


def _write_data(path: Path, X, names):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(names)] + [",".join(repr(float(v)) for v in row) for row in X]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def hetero(tmp_path):
    sim = simulate(6, 7, participants=3, samples=3000, heterogeneous=True, spread=0.8, seed=11)
    shards = tmp_path / "shards"
    truths = tmp_path / "truths"
    for p, (X, Wp) in enumerate(zip(sim.shards, sim.weights)):
        _write_data(shards / f"participant-{p + 1:02d}.csv", X, sim.names)
        write_adjacency_csv(truths / f"participant-{p + 1:02d}.csv", Wp, sim.names)
    est = tmp_path / "estimate.csv"
    write_adjacency_csv(est, np.where(sim.W != 0, 1.0, 0.0), sim.names)
    return sim, shards, truths, est


def test_refit_writes_one_adjacency_per_participant_and_recovers_weights(tmp_path, hetero):
    sim, shards, truths, est = hetero
    out = tmp_path / "out"
    res = run("refit", est, shards, "--out", out, "--truth-dir", truths, "--json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["participant"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert {"participant", "file", "rows", "mse", "edges"} <= set(r)
        assert r["rows"] == 3000 and r["edges"] == sim.n_edges
        assert r["mse"] < 0.01
    for p in range(3):
        g = read_graph(out / f"participant-{p + 1:02d}.csv")
        assert g.names == sim.names
        assert np.allclose(g.W, sim.weights[p], atol=0.1)
        assert np.all(g.W[sim.W == 0] == 0)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generator"] == "bnsl refit" and len(summary["participants"]) == 3
    assert "own rows" in summary["locality"]
    assert "MSE" in res.stderr  # table on stderr, JSON alone on stdout


def test_mse_is_null_without_truth_and_rerun_into_same_dir_works(tmp_path, hetero):
    _, shards, _, est = hetero
    out = tmp_path / "out"
    for _ in range(2):
        res = run("refit", est, str(shards / "*.csv"), "--out", out, "--json", "--quiet")
        assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 3 and all(r["mse"] is None for r in rows)
    # a rerun with fewer participants removes the outputs it no longer writes
    res = run("refit", est, shards / "participant-01.csv", shards / "participant-02.csv", "--out", out, "-q")
    assert res.exit_code == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["participant-01.csv", "participant-02.csv", "summary.json"]


def test_ridge_shrinks_weights(tmp_path, hetero):
    _, shards, _, est = hetero
    sums = []
    for k, ridge in enumerate((0.0, 5.0)):
        out = tmp_path / f"r{k}"
        res = run("refit", est, shards, "--out", out, "--ridge", ridge, "-q")
        assert res.exit_code == 0, res.stderr
        sums.append(np.abs(read_graph(out / "participant-01.csv").W).sum())
    assert sums[1] < 0.8 * sums[0]


def test_nodes_matched_by_name_and_edges_csv_estimate(tmp_path, hetero):
    sim, shards, truths, _ = hetero
    est = tmp_path / "edges.csv"
    write_edges_csv(est, sim.W, sim.names)  # an edges CSV cannot list isolated nodes
    res = run("refit", est, shards, "--files-from", "/dev/null", "--out", tmp_path / "o", "--truth-dir", truths,
              "--json", "-q")
    assert res.exit_code == 0, res.stderr
    assert all(r["mse"] < 0.01 for r in json.loads(res.stdout))


@pytest.mark.parametrize(
    "case",
    ["missing_estimate", "unknown_node", "bad_data", "no_truth", "shard_mismatch", "estimate_shape"],
)
def test_bad_input_exits_3_with_one_line(tmp_path, hetero, case):
    sim, shards, truths, est = hetero
    args = [est, shards]
    if case == "missing_estimate":
        args[0] = tmp_path / "nope.csv"
    elif case == "unknown_node":
        names = list(sim.names)
        names[0] = "zzz"
        args[0] = tmp_path / "renamed.csv"
        write_adjacency_csv(args[0], sim.W, names)
    elif case == "bad_data":
        bad = tmp_path / "bad.csv"
        bad.write_text(",".join(sim.names) + "\n" + ",".join(["1"] * 5 + ["x"]) + "\n" + ",".join(["2"] * 6) + "\n")
        args[1] = bad
    elif case == "no_truth":
        args += ["--truth-dir", tmp_path / "empty"]
        (tmp_path / "empty").mkdir()
    elif case == "shard_mismatch":
        other = tmp_path / "other.csv"
        _write_data(other, np.random.default_rng(0).normal(size=(5, 2)), ["a", "b"])
        args += [other]
    elif case == "estimate_shape":
        args[0] = shards / "participant-01.csv"
    res = run("refit", *args, "--out", tmp_path / "o")
    assert res.exit_code == 3, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "o" / "summary.json").exists()


def test_refuses_to_clobber_foreign_files(tmp_path, hetero):
    _, shards, _, est = hetero
    out = tmp_path / "o"
    out.mkdir()
    (out / "participant-01.csv").write_text("precious\n")
    res = run("refit", est, shards, "--out", out)
    assert res.exit_code == 2
    assert (out / "participant-01.csv").read_text() == "precious\n"
    assert run("refit", est, shards, "--out", out, "--force", "-q").exit_code == 0


def test_negative_ridge_is_a_usage_error(tmp_path, hetero):
    _, shards, _, est = hetero
    assert run("refit", est, shards, "--out", tmp_path / "o", "--ridge", "-1").exit_code == 2


def test_refit_on_a_private_structure_says_its_weights_are_not_private(tmp_path, hetero):
    """Issue 12.9: refit on a DP structure wrote non-private weights without a word."""
    sim, shards, _, _ = hetero
    run_dir = tmp_path / "dprun"
    res = run("learn", shards, "-m", "fed-sparse", "--dp", "--epsilon", "20", "--rounds", "3", "-q", "--out", run_dir)
    assert res.exit_code == 0, res.output
    out = tmp_path / "refit"
    res = run("refit", run_dir / "adjacency.csv", shards, "--out", out, "-q")
    assert res.exit_code == 0, res.output
    assert "NOT differentially private" in res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert "not differentially private" in summary["privacy"] and summary["structure_privacy"]["epsilon"] <= 20
    res = run("refit", hetero[3], shards, "--out", tmp_path / "plain", "-q")  # a structure from no private run
    assert "NOT differentially private" not in res.stderr


# ---------------------------------------------------------------------------------------------
# refit reads the shards as the learn run did (issue 29, item 5)


def _site_files(shards: Path, dst: Path, decimal_comma: bool = False) -> list[Path]:
    """The shards as sites export them: a row-id column ``id`` and a text column ``site`` around the
    variables; site 2 writes ';' (and, with ``decimal_comma``, 1,5 for 1.5)."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for k, p in enumerate(sorted(shards.glob("*.csv"))):
        lines = p.read_text().splitlines()
        rows = [f"id,{lines[0]},site"] + [f"{i},{ln},Site {k + 1}" for i, ln in enumerate(lines[1:])]
        if k == 1:
            rows = [r.replace(",", ";") for r in rows]
            if decimal_comma:
                rows = [r.replace(".", ",") for r in rows]
        q = dst / f"site{k + 1}.csv"
        q.write_text("\n".join(rows) + "\n")
        out.append(q)
    return out


def _weights(out: Path) -> list[str]:
    return [(out / f"participant-{k:02d}.csv").read_text() for k in (1, 2, 3)]


def test_refit_reuses_the_read_options_of_the_learn_run(tmp_path, hetero):
    _, shards, _, _ = hetero
    sites = _site_files(shards, tmp_path / "sites")
    learned = tmp_path / "run"
    res = run("learn", *sites, "--index-col", "id", "--drop", "site", "--rounds", "20", "--seed", "1", "-q",
              "--out", learned)
    assert res.exit_code == 0, res.output
    recorded = json.loads((learned / "report.json").read_text())["input"]
    assert recorded["index_col"] == "id" and recorded["drop"] == ["site"]
    # the same structure (without the report beside it) refitted on the plain shards: what refit must
    # give on the sites' files
    alone = tmp_path / "alone.csv"
    alone.write_text((learned / "adjacency.csv").read_text())
    ref = run("refit", alone, *sorted(shards.glob("*.csv")), "--out", tmp_path / "ref", "-q")
    assert ref.exit_code == 0, ref.output
    res = run("refit", learned, *sites, "--out", tmp_path / "again")
    assert res.exit_code == 0, res.output
    assert "read the shards as the learn run did (--drop site --index-col id;" in res.stderr
    assert _weights(tmp_path / "again") == _weights(tmp_path / "ref")
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert summary["input"]["index_col"] == "id" and summary["input"]["separators"] == [",", ";", ","]
    # an option given to refit replaces the recorded one (the others still apply): dropping x6 too
    # leaves a node of the structure without its column
    res = run("refit", learned, *sites, "--drop", "site,x6", "--out", tmp_path / "o", "-q")
    assert res.exit_code == 3 and "node(s) 'x6' are not columns of the data" in res.stderr, res.output
    assert not (tmp_path / "o").exists()
    # without the report beside it, refit knows nothing of the learn run's options
    res = run("refit", alone, *sites, "--out", tmp_path / "o2", "-q")
    assert res.exit_code == 3 and "'Site 1' is not a number" in res.stderr, res.output
    res = run("refit", alone, *sites, "--index-col", "id", "--drop", "site", "--out", tmp_path / "o3", "-q")
    assert res.exit_code == 0 and _weights(tmp_path / "o3") == _weights(tmp_path / "ref"), res.output


def test_refit_reuses_a_recorded_decimal_comma_and_sep(tmp_path, hetero):
    _, shards, _, est = hetero
    sites = _site_files(shards, tmp_path / "sites", decimal_comma=True)
    ref = run("refit", est, *sorted(shards.glob("*.csv")), "--out", tmp_path / "ref", "-q")
    assert ref.exit_code == 0, ref.output
    # a report recording --decimal , (as `bnsl learn --decimal ,` writes it) beside the structure
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "adjacency.csv").write_text(est.read_text())
    entry = {"columns": None, "drop": ["site"], "index_col": "id", "na": "error", "header": "auto",
             "encoding": "utf-8", "decimal": ",", "sep": None, "separators": [",", ";", ","], "dropped_rows": [0, 0, 0]}
    (run_dir / "report.json").write_text(json.dumps({"input": entry}))
    res = run("refit", run_dir, *sites, "--out", tmp_path / "again")
    assert res.exit_code == 0, res.output
    assert "--decimal ," in res.stderr
    assert _weights(tmp_path / "again") == _weights(tmp_path / "ref")
    # without the recorded decimal mark the ';' site's numbers are named as decimal commas
    res = run("refit", run_dir, *sites, "--decimal", ".", "--out", tmp_path / "o")
    assert res.exit_code == 3 and "Traceback" not in res.output, res.output
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]  # one line, saying which options were reused
    assert line.startswith("error: ") and "site2.csv" in line and "pass --decimal ," in line, line
    assert line.endswith("(read with the options of the learn run: --drop site --index-col id; give others here "
                         "to change them)"), line
    assert not (tmp_path / "o").exists()
    # a recorded --sep is reused too: it forces ';' on every site, and the ',' sites are refused
    entry.update(decimal=".", sep=";")
    (run_dir / "report.json").write_text(json.dumps({"input": entry}))
    res = run("refit", run_dir, *sites, "--out", tmp_path / "o", "-q")
    assert res.exit_code == 3 and "site1.csv" in res.stderr and "--sep ','" in res.stderr, res.output


def test_a_structure_learned_with_categorical_columns_is_refused_in_one_line_before_reading(tmp_path):
    sim = tmp_path / "sim"
    assert run("simulate", "-d", 5, "-e", 5, "-p", 2, "-n", 300, "--categorical", 0.4, "--seed", 2, "--out", sim,
               "-q").exit_code == 0
    learned = tmp_path / "learned"
    assert run("learn", sim / "shards", "--seed", 1, "--out", learned, "-q").exit_code == 0
    res = run("refit", learned, sim / "shards", "--out", tmp_path / "refit", "-q")
    assert res.exit_code == 3, res.output
    assert "the learn run had categorical columns" in res.stderr and "not a number" not in res.stderr
    assert len([ln for ln in res.stderr.splitlines() if ln.strip()]) == 1
    assert not (tmp_path / "refit").exists()
