"""bnsl learn --bootstrap / --min-strength, and bnsl evaluate's precision by strength band."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from bnsl_cli.dag import is_dag
from tests._cli import run
from tests._shards import TINY


def _matrix(path: Path) -> np.ndarray:
    rows = list(csv.reader(path.open()))
    return np.array([[float(x) for x in r[1:]] for r in rows[1:]])


def _edges(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open()))


def test_bootstrap_annotates_the_runs_own_graph(tmp_path, shards):
    plain, boot = tmp_path / "plain", tmp_path / "boot"
    assert run("learn", shards, "--out", plain, "--seed", 3, "-q").exit_code == 0
    res = run("learn", shards, "--out", boot, "--seed", 3, "--bootstrap", 8, "-q")
    assert res.exit_code == 0, res.output
    # the graph is the run's own: byte-identical adjacency
    assert (plain / "adjacency.csv").read_bytes() == (boot / "adjacency.csv").read_bytes()
    F = _matrix(boot / "strength.csv")
    d = F.shape[0]
    assert F.shape == (d, d) and np.all(F >= 0) and np.all(F + F.T <= 1 + 1e-12)
    assert np.all(np.diag(F) == 0)
    assert np.all(np.round(F * 8, 9) == np.round(F * 8))  # shares of 8 replicates
    edges = _edges(boot / "edges.csv")
    assert edges and set(edges[0]) == {"source", "target", "weight", "strength", "direction"}
    names = [r[0] for r in list(csv.reader((boot / "strength.csv").open()))[1:]]
    for e in edges:
        i, j = names.index(e["source"]), names.index(e["target"])
        assert float(e["strength"]) == pytest.approx(round(F[i, j] + F[j, i], 4))
        assert float(e["direction"]) == pytest.approx(round(F[i, j] / (F[i, j] + F[j, i]), 4))
    conf = json.loads((boot / "report.json").read_text())["confidence"]
    assert conf["replicates"] == 8 and conf["completed"] == 8 and conf["min_strength"] is None
    assert 0.0 <= conf["estimated_threshold"] <= 1.0
    assert conf["edges"] == len(edges)


def test_bootstrap_is_reproducible_and_independent_of_workers(tmp_path, shards):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("learn", shards, "--out", a, "--seed", 5, "--bootstrap", 6, "-q").exit_code == 0
    assert run("learn", shards, "--out", b, "--seed", 5, "--bootstrap", 6, "--workers", 2, "-q").exit_code == 0
    assert (a / "strength.csv").read_bytes() == (b / "strength.csv").read_bytes()
    c = tmp_path / "c"
    assert run("learn", shards, "--out", c, "--seed", 6, "--bootstrap", 6, "-q").exit_code == 0
    # another seed resamples other rows: the strengths may coincide on a clear graph, the streams may not
    from bnsl_cli.bootstrap import resample_rows

    X = np.arange(40.0).reshape(20, 2)
    assert not np.array_equal(resample_rows(X, 5, 0, 0), resample_rows(X, 6, 0, 0))
    assert not np.array_equal(resample_rows(X, 5, 0, 0), resample_rows(X, 5, 1, 0))
    assert not np.array_equal(resample_rows(X, 5, 0, 0), resample_rows(X, 5, 0, 1))


def test_min_strength_returns_the_averaged_network(tmp_path, shards):
    out = tmp_path / "avg"
    res = run("learn", shards, "--out", out, "--seed", 2, "--bootstrap", 10, "--min-strength", 0.6, "-q")
    assert res.exit_code == 0, res.output
    W = _matrix(out / "adjacency.csv")
    F = _matrix(out / "strength.csv")
    S = F + F.T
    assert is_dag(W)
    E = W != 0
    assert np.all(S[E] >= 0.6 - 1e-9)
    # every pair at or above the threshold is in the graph (one way) unless both ways close a cycle
    from bnsl_cli.dag import find_cycle_edges

    for i, j in zip(*np.nonzero(np.triu(S >= 0.6 - 1e-9, 1))):
        if not (E[i, j] or E[j, i]):
            for a, b in ((i, j), (j, i)):
                if F[a, b] > 0:
                    T = E.astype(float)
                    T[a, b] = 1.0
                    assert find_cycle_edges(T).any()
    rep = json.loads((out / "report.json").read_text())
    assert rep["confidence"]["min_strength"] == 0.6
    assert rep["confidence"]["edges"] == int(E.sum())
    auto = tmp_path / "auto"
    assert run("learn", shards, "--out", auto, "--seed", 2, "--bootstrap", 10, "--min-strength", "auto", "-q").exit_code == 0
    conf = json.loads((auto / "report.json").read_text())["confidence"]
    assert conf["min_strength"] == conf["estimated_threshold"]
    Wa = _matrix(auto / "adjacency.csv")
    assert np.all(S[Wa != 0] > conf["estimated_threshold"])


@pytest.mark.parametrize("args, words", [
    (("--min-strength", 0.5), "needs --bootstrap"),
    (("--bootstrap", 3, "--min-strength", 1.5), "(0, 1]"),
    (("--bootstrap", -1), "--bootstrap"),
    (("--bootstrap", 3, "-m", "local-notears"), "one graph per participant"),
    (("--bootstrap", 3, "--dp", "--epsilon", 5, "-m", "fed-sparse"), "cannot resample its releases"),
])
def test_bad_confidence_options_are_one_line_errors(tmp_path, shards, args, words):
    out = tmp_path / "bad"
    res = run("learn", shards, "--out", out, *args)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert not out.exists()


def test_private_bootstrap_spends_the_same_epsilon(tmp_path, shards):
    a, b = tmp_path / "a", tmp_path / "b"
    common = ("--dp", "--epsilon", 20, "--seed", 4, "-q")
    assert run("learn", shards, "--out", a, *common).exit_code == 0
    res = run("learn", shards, "--out", b, *common, "--bootstrap", 5)
    assert res.exit_code == 0, res.output
    ra, rb = (json.loads((p / "report.json").read_text()) for p in (a, b))
    assert ra["privacy"]["epsilon"] == rb["privacy"]["epsilon"]
    assert ra["privacy"]["delta"] == rb["privacy"]["delta"]
    assert ra["privacy"] == rb["privacy"]  # the whole account: no further release
    assert (a / "adjacency.csv").read_bytes() == (b / "adjacency.csv").read_bytes()
    assert rb["confidence"]["completed"] >= 1 and "post-processing" in rb["confidence"]["source"]
    assert (b / "strength.csv").is_file()


def test_evaluate_reports_precision_by_strength_band(tmp_path, shards):
    out = tmp_path / "boot"
    assert run("learn", shards, "--out", out, "--seed", 3, "--bootstrap", 6, "-q").exit_code == 0
    truth = TINY / "truth.csv"
    if not truth.exists():
        pytest.skip("the tiny example ships no truth")
    res = run("evaluate", out / "edges.csv", out / "report.json", "-t", truth, "--json", "-q")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    edges = _edges(out / "edges.csv")
    for row in rows:  # the report finds strength.csv beside it
        bands = row["strength_bands"]
        assert [b["band"] for b in bands] == ["[0.9, 1]", "[0.7, 0.9)", "[0.5, 0.7)", "[0, 0.5)"]
        assert sum(b["edges"] for b in bands) == len(edges)
        for b in bands:
            if b["edges"]:
                assert 0 <= b["precision_directed"] <= b["precision"] <= 1
    plain = run("evaluate", out / "adjacency.csv", "-t", truth, "--csv", "-q")
    assert plain.exit_code == 0
    assert "precision_0.9-1" in plain.stdout.splitlines()[0]  # strength.csv is beside adjacency.csv too
