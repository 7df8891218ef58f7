"""`bnsl evaluate` driven through the real Typer app."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bnsl_cli.io.dot import write_dot
from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.io.graphs import graph_to_json, write_adjacency_csv, write_edges_csv
from bnsl_cli.metrics import METRIC_KEYS
from tests._cli import run

DATA = Path(__file__).parents[1] / "data"
CDT_TRUTH = DATA / "sachs_truth_18edges_cdt.csv"  # consensus graph with the cycle plc -> pip2 -> pip3 -> plc
SACHS_TRUTH = DATA / "sachs_truth_18edges.csv"


@pytest.fixture()
def truth(tmp_path):
    p = tmp_path / "truth.csv"
    shutil.copy(SACHS_TRUTH, p)
    return p


def test_identical_graph_is_perfect_in_every_format(tmp_path, truth):
    g = read_graph(truth)
    paths = [tmp_path / "a.csv", tmp_path / "e.csv", tmp_path / "g.dot", tmp_path / "r.json"]
    write_adjacency_csv(paths[0], g.W, g.names)
    write_edges_csv(paths[1], g.W, g.names)
    write_dot(paths[2], g.W, g.names)
    paths[3].write_text(json.dumps({"graph": graph_to_json(g.W, g.names)}))
    res = run("evaluate", *paths, "--truth", truth, "--json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["estimate"] for r in rows] == [str(p) for p in paths]
    for r in rows:
        assert set(METRIC_KEYS) <= set(r)
        assert r["shd"] == 0 and r["tpr"] == 1.0 and r["fdr"] == 0.0 and r["nnz"] == 18 and r["d"] == 11
    assert "SHD" in res.stderr  # the table goes to stderr when stdout carries JSON


def test_several_estimates_give_several_rows_with_the_right_numbers(tmp_path, truth):
    g = read_graph(truth)
    W = g.W.copy()
    i, j = np.argwhere(W != 0)[0]
    W[i, j], W[j, i] = 0.0, 1.0  # one reversed edge
    rev = tmp_path / "rev.csv"
    write_adjacency_csv(rev, W, g.names)
    empty = tmp_path / "empty.csv"
    write_adjacency_csv(empty, np.zeros_like(W), g.names)
    res = run("evaluate", truth, rev, empty, "--truth", truth, "--json")
    assert res.exit_code == 0, res.stderr
    same, r, e = json.loads(res.stdout)
    assert same["shd"] == 0
    assert (r["shd"], r["reversed"], r["tp"], r["fn"]) == (1, 1, 17, 1)
    assert r["tpr"] == pytest.approx(17 / 18)
    assert (e["nnz"], e["shd"], e["fdr"], e["precision"], e["tpr"]) == (0, 18, None, None, 0.0)


def test_csv_output(tmp_path, truth):
    res = run("evaluate", truth, truth, "--truth", truth, "--csv")
    assert res.exit_code == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == 2
    assert rows[0]["estimate"] == str(truth) and rows[0]["shd"] == "0" and rows[0]["tpr"] == "1.0"
    assert rows[0]["weight_mse"] == ""  # None -> empty cell
    assert rows[0]["is_dag"] == "true"


def test_table_alone_goes_to_stdout(truth):
    res = run("evaluate", truth, "--truth", truth)
    assert res.exit_code == 0
    assert "SHD" in res.stdout and str(truth.name) in res.stdout
    assert res.stderr == ""


def test_json_and_csv_together_is_a_usage_error(truth):
    res = run("evaluate", truth, "--truth", truth, "--json", "--csv")
    assert res.exit_code == 2 and "either --json or --csv" in res.stderr


def test_threshold_drops_small_weights(tmp_path, truth):
    g = read_graph(truth)
    W = g.W * 0.8
    W[0, 2] = 0.05  # a weak spurious edge (raf -> plc)
    est = tmp_path / "w.csv"
    write_adjacency_csv(est, W, g.names)
    r0 = json.loads(run("evaluate", est, "--truth", truth, "--json").stdout)[0]
    r1 = json.loads(run("evaluate", est, "--truth", truth, "--json", "--threshold", "0.1").stdout)[0]
    assert (r0["nnz"], r0["extra"]) == (19, 1)
    assert (r1["nnz"], r1["shd"]) == (18, 0)
    assert run("evaluate", est, "--truth", truth, "--threshold", "-1").exit_code == 2


def test_cyclic_sachs_truth_needs_the_flag(truth):
    res = run("evaluate", truth, "--truth", CDT_TRUTH, "--json")
    assert res.exit_code == 3
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cycle" in lines[0] and "--allow-cyclic-truth" in lines[0]
    assert str(CDT_TRUTH) in lines[0] and "Traceback" not in res.stderr
    res = run("evaluate", truth, "--truth", CDT_TRUTH, "--json", "--allow-cyclic-truth")
    assert res.exit_code == 0, res.stderr
    r = json.loads(res.stdout)[0]
    # the cdt graph and the 18-edge graph differ, so the comparison is not trivially perfect
    assert r["shd"] > 0 and 0 < r["tpr"] < 1


def test_cyclic_estimate_is_reported(tmp_path, truth):
    g = read_graph(truth)
    W = g.W.copy()
    i, j = np.argwhere(W != 0)[0]
    W[j, i] = 0.5  # add the reverse with another weight: a 2-cycle (equal weights would be an undirected edge)
    est = tmp_path / "cyc.csv"
    write_adjacency_csv(est, W, g.names)
    r = json.loads(run("evaluate", est, "--truth", truth, "--json").stdout)[0]
    assert r["is_dag"] is False and r["reversed"] == 1 and r["shd"] == 1 and r["undirected"] == 0
    assert r["shd_cpdag"] is None


def test_edges_csv_isolated_nodes_are_padded(tmp_path):
    truth = tmp_path / "t.csv"
    truth.write_text(",a,b,c,d\na,0,1,0,0\nb,0,0,0,0\nc,0,0,0,0\nd,0,0,0,0\n")
    est = tmp_path / "e.csv"
    est.write_text("source,target,weight\na,b,0.7\n")  # c and d are isolated
    r = json.loads(run("evaluate", est, "--truth", truth, "--json").stdout)[0]
    assert r["d"] == 4 and r["shd"] == 0
    assert r["fpr"] == 0.0  # d = 4: negatives = 6 - 1 = 5, not 1 - 1 = 0 as with only a, b


def test_edges_csv_truth_takes_nodes_from_estimates(tmp_path):
    truth = tmp_path / "t.csv"
    truth.write_text("source,target\na,b\n")
    est = tmp_path / "e.csv"
    est.write_text(",a,b,c\na,0,1,0\nb,0,0,1\nc,0,0,0\n")
    r = json.loads(run("evaluate", est, "--truth", truth, "--json").stdout)[0]
    assert r["d"] == 3 and r["extra"] == 1 and r["tp"] == 1


def test_unknown_node_in_estimate_names_the_file(tmp_path, truth):
    est = tmp_path / "est.csv"
    est.write_text("source,target\nraf,mek\nraf,zzz\n")
    res = run("evaluate", est, "--truth", truth)
    assert res.exit_code == 3
    assert str(est) in res.stderr and "'zzz'" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "content",
    ["", "a,b\n0,x\n1,0\n", "digraph { a -> ; }", '{"graph": 1}'],
    ids=["empty", "text", "dot", "json"],
)
def test_bad_file_exits_3_with_one_line(tmp_path, truth, content):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    res = run("evaluate", bad, "--truth", truth, "--json")
    assert res.exit_code == 3
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and str(bad) in lines[0]
    assert "Traceback" not in res.stderr


def test_missing_truth_file(tmp_path, truth):
    res = run("evaluate", truth, "--truth", tmp_path / "nope.csv")
    assert res.exit_code == 3 and "file not found" in res.stderr


def test_help_states_orientation():
    res = run("evaluate", "--help", env={"COLUMNS": "200", "TERM": "dumb"})
    assert res.exit_code == 0
    assert "W[i, j] is the edge i -> j" in res.stdout
    for opt in ("--truth", "--threshold", "--json", "--csv", "--allow-cyclic-truth"):
        assert opt in res.stdout


def test_real_process_exit_code_and_clean_error(tmp_path, truth):
    import subprocess
    import sys

    bad = tmp_path / "bad.csv"
    bad.write_text(",a,b\na,0,x\nb,0,0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bnsl_cli", "evaluate", str(bad), "--truth", str(truth)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.strip() == f"error: {bad}: row 2, column 'b': 'x' is not a number"


# ---------------------------------------------------------------------------------------------
# equivalence-class metrics and local-notears reports


def _local_report(path: Path, graphs, names):
    report = {"method": "local-notears", "graph": None,
              "local": [{"participant": k, "graph": graph_to_json(W, names)} for k, W in enumerate(graphs, start=1)]}
    path.write_text(json.dumps(report))
    return path


def test_cpdag_and_skeleton_shd_in_json_csv_and_table(tmp_path):
    names = ["a", "b", "c"]
    chain = np.array([[0, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=float)  # a -> b -> c
    truth = tmp_path / "truth.csv"
    write_adjacency_csv(truth, chain, names)
    fork = tmp_path / "fork.csv"
    write_adjacency_csv(fork, np.array([[0, 0, 0], [1, 0, 1], [0, 0, 0]], dtype=float), names)  # a <- b -> c
    collider = tmp_path / "collider.csv"
    write_adjacency_csv(collider, np.array([[0, 1, 0], [0, 0, 0], [0, 1, 0]], dtype=float), names)
    res = run("evaluate", fork, collider, "--truth", truth, "--json")
    assert res.exit_code == 0, res.stderr
    f, c = json.loads(res.stdout)
    assert (f["shd"], f["shd_cpdag"], f["shd_skeleton"]) == (1, 0, 0)  # Markov equivalent to the chain
    assert (c["shd"], c["shd_cpdag"], c["shd_skeleton"]) == (1, 2, 0)
    assert "SHD cpdag" in res.stderr and "SHD skel" in res.stderr
    res = run("evaluate", fork, "--truth", truth, "--csv")
    row = next(csv.DictReader(io.StringIO(res.stdout)))
    assert row["shd_cpdag"] == "0" and row["shd_skeleton"] == "0" and row["participant"] == ""


def test_local_notears_report_gives_one_row_per_participant(tmp_path, truth):
    g = read_graph(truth)
    W2 = g.W.copy()
    i, j = np.argwhere(W2 != 0)[0]
    W2[i, j] = 0.0  # participant 2 misses one edge
    report = _local_report(tmp_path / "report.json", [g.W, W2, np.zeros_like(g.W)], g.names)
    res = run("evaluate", report, "--truth", truth, "--json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["participant"] for r in rows] == [1, 2, 3]
    assert [r["shd"] for r in rows] == [0, 1, 18]
    assert rows[1]["estimate"] == f"{report} [participant 2]"
    assert "[participant 2]" in res.stderr  # the label is not eaten as console markup
    res = run("evaluate", report, "--truth", truth, "--participant", 2, "--json")
    assert res.exit_code == 0, res.stderr
    (only,) = json.loads(res.stdout)
    assert only["participant"] == 2 and only["shd"] == 1


def test_local_notears_report_with_an_unknown_participant_is_exit_3(tmp_path, truth):
    g = read_graph(truth)
    report = _local_report(tmp_path / "report.json", [g.W], g.names)
    res = run("evaluate", report, "--truth", truth, "--participant", 4)
    assert res.exit_code == 3
    assert "participant 4" in res.stderr and "--participant" in res.stderr and "Traceback" not in res.stderr
    res = run("evaluate", report, "--truth", truth, "--participant", 0)
    assert res.exit_code == 2


def test_read_graph_on_a_local_report_names_the_option(tmp_path, truth):
    from bnsl_cli.errors import InputDataError

    g = read_graph(truth)
    report = _local_report(tmp_path / "report.json", [g.W, g.W], g.names)
    with pytest.raises(InputDataError, match="--participant"):
        read_graph(report)
    res = run("evaluate", truth, "--truth", report)  # as the truth it is ambiguous: an error, not a guess
    assert res.exit_code == 3 and "local-notears" in res.stderr


def test_local_notears_report_on_stdin_is_read_once(tmp_path, truth):
    g = read_graph(truth)
    report = _local_report(tmp_path / "report.json", [g.W, np.zeros_like(g.W)], g.names)
    res = run("evaluate", "-", "--truth", truth, "--json", input=report.read_text())
    assert res.exit_code == 0, res.stderr
    assert [r["shd"] for r in json.loads(res.stdout)] == [0, 18]
    res = run("evaluate", "-", "--truth", truth, "--json", input=truth.read_text())
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)[0]["shd"] == 0
