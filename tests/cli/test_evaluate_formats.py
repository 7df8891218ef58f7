"""`bnsl evaluate` on other tools' formats: bnlearn arc lists, Tetrad graph text, headerless matrices,
CPDAG estimates (undirected edges), and one clear line for a file that is none of them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.io.graphs import cpdag_csv_text
from bnsl_cli.metrics import cpdag, pdag_undirected, structure_metrics
from tests._cli import run
from tests._shards import TINY


# a -> b -> d <- c, b -> e; its CPDAG: a - b, b -> d <- c (a v-structure), b - e
TRUTH = ",a,b,c,d,e\na,0,1,0,0,0\nb,0,0,0,1,1\nc,0,0,0,1,0\nd,0,0,0,0,0\ne,0,0,0,0,0\n"


def _row(*args):
    res = run("evaluate", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)[0]


@pytest.fixture()
def truth(tmp_path):
    p = tmp_path / "truth.csv"
    p.write_text(TRUTH)
    return p


def _one_line(res, code=3):
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert "Traceback" not in res.output
    return lines[0]


# -- bnlearn ------------------------------------------------------------------------------------


def test_bnlearn_arc_list_plain_and_as_r_writes_it(tmp_path, truth):
    plain = tmp_path / "arcs.csv"
    plain.write_text("from,to\na,b\nb,d\nc,d\nb,e\n")
    r_style = tmp_path / "arcs_r.csv"  # write.csv(arcs(fit)) in R: quoted, with a row-number column
    r_style.write_text('"","from","to"\n"1","a","b"\n"2","b","d"\n"3","c","d"\n"4","b","e"\n')
    for p in (plain, r_style):
        g = read_graph(p)
        assert g.all_nodes_listed is False
        r = _row(p, "--truth", truth)
        assert (r["shd"], r["tp"], r["nnz"], r["shd_cpdag"], r["undirected"]) == (0, 4, 4, 0, 0)


def test_bnlearn_arc_listed_both_ways_is_an_undirected_edge(tmp_path, truth):
    p = tmp_path / "cpdag_arcs.csv"
    p.write_text("from,to\na,b\nb,a\nb,d\nc,d\nb,e\n")  # bnlearn lists an undirected arc both ways
    r = _row(p, "--truth", truth)
    assert r["undirected"] == 1 and r["nnz"] == 4 and r["tp"] == 4 and r["reversed"] == 0
    assert r["shd_skeleton"] == 0 and r["shd"] == 0
    # the truth's CPDAG is a - b, b -> d <- c, b - e: only the pair b, e differs (b -> e here)
    assert r["shd_cpdag"] == 1


def test_bnlearn_arc_strengths_are_refused_with_a_hint(tmp_path, truth):
    p = tmp_path / "strength.csv"
    p.write_text("from,to,strength,direction\na,b,0.9,0.7\nb,a,0.9,0.3\na,c,0.05,0.5\n")
    line = _one_line(run("evaluate", p, "--truth", truth))
    assert str(p) in line and "'strength'" in line and "averaged.network" in line


# -- Tetrad -------------------------------------------------------------------------------------

TETRAD = """Graph Nodes:
a;b;c;d;e

Graph Edges:
1. a --> b
2. d <-- b
3. c --> d
4. b --- e

Graph Attributes:
Score: -1234.5
"""


def test_tetrad_graph_text(tmp_path, truth):
    p = tmp_path / "pc.txt"
    p.write_text(TETRAD)
    g = read_graph(p)
    assert g.names == ("a", "b", "c", "d", "e")
    W = g.W
    assert W[0, 1] == 1 and W[1, 3] == 1 and W[2, 3] == 1 and W[1, 4] == W[4, 1] == 1 and W.sum() == 5
    r = _row(p, "--truth", truth)
    assert r["undirected"] == 1 and r["tp"] == 4 and r["shd"] == 0
    expected = structure_metrics(W, read_graph(truth).W, undirected=pdag_undirected(W))["shd_cpdag"]
    assert r["shd_cpdag"] == expected == 1  # a -> b where the truth's CPDAG has a - b


def test_tetrad_older_comma_nodes_and_unnumbered_edges(tmp_path, truth):
    p = tmp_path / "old.txt"
    p.write_text("Graph Nodes:\na,b,c,d,e\n\nGraph Edges:\na --> b\nb --> d\nc --> d\nb --> e\n")
    assert _row(p, "--truth", truth)["shd"] == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("Graph Nodes:\na;b\n\nGraph Edges:\n1. a o-> b\n", "'o->'"),
        ("Graph Nodes:\na;b\n\nGraph Edges:\n1. a --> z\n", "'z' is not listed"),
        ("Graph Nodes:\na;b\n\nGraph Edges:\n1. a => b\n", "line 5: expected an edge"),
        ("Graph Nodes:\n\nGraph Edges:\n", "without node names"),
    ],
)
def test_bad_tetrad_files_are_one_line(tmp_path, truth, text, message):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    line = _one_line(run("evaluate", p, "--truth", truth))
    assert str(p) in line and message in line


# -- headerless and numeric names --------------------------------------------------------------


def test_headerless_matrix_is_matched_by_position(tmp_path, truth):
    est = tmp_path / "amat.csv"
    est.write_text("0,1,0,0,0\n0,0,0,1,1\n0,0,0,1,0\n0,0,0,0,0\n0,0,0,0,0\n")
    g = read_graph(est)
    assert g.positional and g.names == ("X1", "X2", "X3", "X4", "X5")
    assert _row(est, "--truth", truth)["shd"] == 0
    bare_truth = tmp_path / "t.csv"  # both headerless
    bare_truth.write_text(est.read_text())
    assert _row(est, "--truth", bare_truth)["shd"] == 0
    named = tmp_path / "named.csv"  # the truth headerless, the estimate named
    named.write_text(TRUTH)
    assert _row(named, "--truth", bare_truth)["shd"] == 0


def test_headerless_matrix_of_another_size_is_one_line(tmp_path, truth):
    est = tmp_path / "amat.csv"
    est.write_text("0,1,0\n0,0,1\n0,0,0\n")
    line = _one_line(run("evaluate", est, "--truth", truth))
    assert str(est) in line and "by position" in line and "5 nodes" in line


def test_numeric_names_are_a_header_when_a_square_matrix_follows(tmp_path):
    p = tmp_path / "genes.csv"
    p.write_text("4,8,13\n0,1,0\n0,0,1\n0,0,0\n")
    g = read_graph(p)
    assert g.names == ("4", "8", "13") and not g.positional and g.W[0, 1] == 1 and g.W[1, 2] == 1


# -- CPDAG estimates ----------------------------------------------------------------------------


def test_cpdag_csv_of_the_truth_scores_zero_at_cpdag_and_skeleton_level(tmp_path, truth):
    g = read_graph(truth)
    p = tmp_path / "cpdag.csv"
    p.write_text(cpdag_csv_text(g.W, g.names))
    r = _row(p, "--truth", truth)
    C = cpdag(g.W)
    assert r["undirected"] == int(np.triu(C & C.T, 1).sum()) > 0
    assert r["shd_cpdag"] == 0 and r["shd_skeleton"] == 0 and r["shd"] == 0
    res = run("evaluate", p, "--truth", truth)  # the table: the SHD cpdag cell is filled, not empty
    assert res.exit_code == 0
    row = [ln for ln in res.stdout.splitlines() if "cpdag.csv" in ln][0]
    cells = [c.strip() for c in row.replace("│", "|").split("|") if c.strip()]
    assert cells[3] == "0"  # estimate, nnz, SHD, SHD cpdag


def test_pdag_counting_by_hand():
    T = np.zeros((4, 4))
    T[0, 1] = T[1, 2] = 1  # 0 -> 1 -> 2; its CPDAG is 0 - 1 - 2
    E = np.zeros((4, 4))
    E[0, 1] = E[1, 0] = 1  # 0 - 1: adjacent in the truth, a true positive
    E[2, 1] = 1  # reversed
    E[0, 3] = 1  # extra
    U = pdag_undirected(E)
    assert U is not None and U[0, 1] and U[1, 0] and U.sum() == 2
    m = structure_metrics(E, T, undirected=U)
    assert (m["nnz"], m["tp"], m["reversed"], m["fp"], m["fn"]) == (3, 1, 1, 2, 1)
    assert (m["extra"], m["missing"], m["shd"], m["shd_skeleton"]) == (1, 0, 2, 1)
    assert m["shd_cpdag"] == 2 and m["undirected"] == 1 and m["is_dag"] is False
    # without the mask the same matrix is a directed graph with a 2-cycle, as before
    d = structure_metrics(E, T)
    assert (d["tp"], d["reversed"], d["undirected"], d["shd_cpdag"]) == (1, 2, 0, None)


def test_unequal_two_cycle_or_directed_cycle_is_not_a_pdag():
    E = np.zeros((3, 3))
    E[0, 1], E[1, 0] = 1.0, 0.5  # a 2-cycle with two weights: a cyclic directed graph
    assert pdag_undirected(E) is None
    P = np.zeros((4, 4))
    P[0, 1] = P[1, 0] = 1  # 0 - 1
    P[1, 2] = P[2, 3] = 1  # 1 -> 2 -> 3
    assert pdag_undirected(P) is not None
    P[3, 1] = 1  # 1 -> 2 -> 3 -> 1: the directed edges have a cycle, so no PDAG
    assert pdag_undirected(P) is None
    assert pdag_undirected(np.triu(np.ones((3, 3)), 1)) is None  # a DAG: no undirected pair


# -- neither ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["name,value\nfoo,1\nbar,2\nbaz,3\n", "a,b\nc,d\ne,f\n"],
    ids=["key-value", "words"],
)
def test_a_file_that_is_no_graph_format_is_one_line_naming_the_formats(tmp_path, truth, text):
    p = tmp_path / "what.csv"
    p.write_text(text)
    line = _one_line(run("evaluate", p, "--truth", truth))
    assert str(p) in line and "not a graph file bnsl knows" in line
    assert "bnlearn arc list (from,to)" in line and "Tetrad" in line
    assert "expected a 2 x 2 matrix" not in line


def test_library_message_starts_with_the_file(tmp_path):
    p = tmp_path / "what.csv"
    p.write_text("x,y\n1,2\n3,4\n5,6\n")
    with pytest.raises(InputDataError) as info:
        read_graph(p)
    assert str(info.value).startswith(str(p))


def test_learn_writes_the_cpdag(tmp_path):
    out = tmp_path / "run"
    res = run("learn", TINY / "shards", "--out", out, "--rounds", "20", "-q", "--seed", "1")
    assert res.exit_code == 0, res.output
    g = read_graph(out / "adjacency.csv")
    c = read_graph(out / "cpdag.csv")
    assert c.names == g.names
    np.testing.assert_array_equal(c.W != 0, cpdag(g.W))
    assert set(np.unique(c.W)) <= {0.0, 1.0}
    r = _row(out / "cpdag.csv", "--truth", TINY / "truth.csv")
    r_dag = _row(out / "adjacency.csv", "--truth", TINY / "truth.csv")
    assert r["shd_cpdag"] == r_dag["shd_cpdag"] and r["shd_skeleton"] == r_dag["shd_skeleton"]
