"""Tests of bnsl_cli.io.graphs: writer -> reader round trips and malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.dot import dot_text, DotUnsupported, parse_dot_flat, parse_dot_pydot, write_dot
from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.io.graphs import adjacency_csv_text, edges_csv_text, Graph, graph_to_json, write_adjacency_csv, write_edges_csv

ODD = ' ,"\'\\;{}[]->#=é中→ßΩ😀'  # spaces, quotes, commas, backslashes, DOT syntax, unicode
NAME_ALPHABET = st.sampled_from(list("abcXYZ019_-.") + list(ODD))


def _ok_name(s: str) -> bool:
    # CSV readers strip surrounding whitespace (as the data reader does for column names)
    return s != "" and s == s.strip()


names_st = st.lists(st.text(NAME_ALPHABET, min_size=1, max_size=8).filter(_ok_name), min_size=1, max_size=6, unique=True)


@st.composite
def graphs(draw):
    names = draw(names_st)
    d = len(names)
    mask = np.array(draw(st.lists(st.booleans(), min_size=d * d, max_size=d * d)), dtype=bool).reshape(d, d)
    np.fill_diagonal(mask, False)
    vals = draw(
        st.lists(
            st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).filter(lambda v: v != 0),
            min_size=d * d,
            max_size=d * d,
        )
    )
    W = np.where(mask, np.array(vals).reshape(d, d), 0.0)
    return Graph(W, tuple(names))


def _write_json(path, W, names):
    path.write_text(json.dumps({"schema_version": 1, "graph": graph_to_json(W, names)}), encoding="utf-8")


WRITERS = {
    "adjacency.csv": write_adjacency_csv,
    "edges.csv": write_edges_csv,
    "graph.dot": write_dot,
    "report.json": _write_json,
}


def _round_trip(tmp_path, fname, g):
    path = tmp_path / fname
    WRITERS[fname](path, g.W, g.names)
    back = read_graph(path)
    if fname == "edges.csv":
        # an edges CSV lists only nodes that have edges; the rest are isolated
        assert set(back.names) <= set(g.names)
        assert back.all_nodes_listed is False
        back = back.reorder(g.names, allow_missing=True)
    else:
        assert back.names == g.names
    np.testing.assert_array_equal(back.W, g.W)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.parametrize("fname", ["adjacency.csv", "edges.csv", "report.json"])
@given(g=graphs())
def test_round_trip_keeps_odd_names_and_exact_weights(tmp_path, fname, g):
    _round_trip(tmp_path, fname, g)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=graphs())
def test_dot_round_trip_keeps_odd_names_and_exact_weights(tmp_path, g):
    _round_trip(tmp_path, "graph.dot", g)


# pydot is the fallback for DOT the fast parser does not handle; both must agree where both parse.
# pydot is slow (~0.1 s per small graph), so few examples.
@settings(max_examples=8, deadline=None)
@given(g=graphs())
def test_fast_dot_parser_agrees_with_pydot(g):
    text = dot_text(g.W, g.names)
    assert parse_dot_flat(text) == parse_dot_pydot(Path("x.dot"), text)


FOREIGN_DOT = """/* written by hand */
strict digraph "my graph" {
  graph [rankdir=LR]; node [shape=box]
  edge [color=red];
# a preprocessor-style line
  size="7,7";
  a [label="A node"] [color=blue];
  a -> b -> "c d" [weight=2.5, label="x"];
  b:port1 -> e:n;  // ports are ignored
  e -> a [label=-0.5]
}
"""


def test_foreign_dot_features_fast_and_pydot_agree(tmp_path):
    p = tmp_path / "f.dot"
    p.write_text(FOREIGN_DOT)
    g = read_graph(p)
    assert g.names == ("A node", "b", "c d", "e")
    assert g.W[0, 1] == 2.5 and g.W[1, 2] == 2.5 and g.W[1, 3] == 1.0 and g.W[3, 0] == -0.5
    assert parse_dot_flat(FOREIGN_DOT) == parse_dot_pydot(p, FOREIGN_DOT)


def test_dot_with_subgraph_falls_back_to_pydot(tmp_path):
    p = tmp_path / "s.dot"
    p.write_text("digraph { subgraph cluster_0 { x; y; } x -> y; y -> z [weight_value=\"3\"]; }")
    with pytest.raises(DotUnsupported):
        parse_dot_flat(p.read_text())
    g = read_graph(p)
    assert set(g.names) == {"x", "y", "z"}
    g = g.reorder(["x", "y", "z"])
    assert g.W[0, 1] == 1.0 and g.W[1, 2] == 3.0


def test_round_trip_sniffs_format_without_suffix(tmp_path):
    names = ("a b", 'say "hi"', "x,y")
    W = np.array([[0, 1.5, 0], [0, 0, -2.0], [0.25, 0, 0]])
    for text in (adjacency_csv_text(W, names), edges_csv_text(W, names), dot_text(W, names),
                 json.dumps({"graph": graph_to_json(W, names)})):
        p = tmp_path / "graph.txt"
        p.write_text(text, encoding="utf-8")
        g = read_graph(p).reorder(names)
        np.testing.assert_array_equal(g.W, W)


def test_dot_file_states_orientation():
    assert "W[i, j]" in dot_text(np.zeros((2, 2)), ["a", "b"])


def test_zero_one_matrix_with_header_and_no_index(tmp_path):
    p = tmp_path / "truth.csv"
    p.write_text("a,b,c\n0,1,0\n0,0,1\n0,0,0\n")
    g = read_graph(p)
    assert g.names == ("a", "b", "c")
    assert g.W.tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 0]]  # row = parent: a -> b, b -> c


def test_matrix_with_named_index_column(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("node,a,b\na,0,2.5\nb,0,0\n")
    g = read_graph(p)
    assert g.names == ("a", "b") and g.W[0, 1] == 2.5


def test_numeric_names_are_fine_with_an_index_column(tmp_path):
    p = tmp_path / "m.csv"
    write_adjacency_csv(p, np.array([[0, 1.0], [0, 0]]), ["1", "2"])
    assert read_graph(p).names == ("1", "2")


def test_sachs_truth_copy_reads():
    g = read_graph(Path(__file__).parents[1] / "data" / "sachs_truth_18edges.csv")
    assert len(g.names) == 11 and int((g.W != 0).sum()) == 18


def test_dot_from_other_tools_and_edge_only_dot(tmp_path):
    p = tmp_path / "g.dot"
    p.write_text('digraph G {\n  "a" -> b [weight=2];\n  b -> c;\n}\n')
    g = read_graph(p)
    assert g.names == ("a", "b", "c") and g.W[0, 1] == 2.0 and g.W[1, 2] == 1.0
    assert g.all_nodes_listed is False


def test_reorder_pads_missing_nodes_and_rejects_unknown():
    g = Graph(np.array([[0, 1.0], [0, 0]]), ("a", "b"))
    h = g.reorder(["c", "b", "a"], allow_missing=True)
    assert h.names == ("c", "b", "a")
    assert h.W.tolist() == [[0, 0, 0], [0, 0, 0], [0, 1, 0]]
    with pytest.raises(InputDataError, match="missing nodes 'c'"):
        g.reorder(["a", "b", "c"])
    with pytest.raises(InputDataError, match=r"est\.csv: .*unknown nodes 'b'"):
        g.reorder(["a"], source="est.csv", allow_missing=True)


# ---------------------------------------------------------------------------------------------
# malformed files: InputDataError whose message names the file


MALFORMED = {
    "empty.csv": ("", "empty"),
    "blank.csv": ("\n \n", "empty"),
    "commas.csv": (",,\n", "no values"),
    "text.csv": (",a,b\na,0,x\nb,0,0\n", r"row 2, column 'b': 'x' is not a number"),
    "nan.csv": (",a,b\na,0,nan\nb,0,0\n", "not finite"),
    "ragged.csv": (",a,b\na,0\nb,0,0\n", "row 2 has 1 values, expected 2"),
    "rows.csv": (",a,b\na,0,1\n", "expected a 2 x 2 matrix, found 1 rows"),
    "dup.csv": (",a,a\na,0,1\na,0,0\n", "duplicate node names"),
    "emptyname.csv": (",a,\na,0,1\n,0,0\n", "empty node name"),
    "label.csv": (",a,b\nb,0,1\na,0,0\n", "labelled 'b'"),
    "selfloop.csv": (",a,b\na,1,0\nb,0,0\n", "self-loop on node 'a'"),
    # a square block of numbers is a headerless matrix (tests/io/test_graph_formats.py); a block that is
    # not square cannot be one
    "noheader.csv": ("0,1,0\n0,0\n", r"without a header row, but row 1 has 3 values and there are 2 rows"),
    "edges_bad_w.csv": ("source,target,weight\na,b,heavy\n", r"row 2, column 'weight'"),
    "edges_self.csv": ("source,target,weight\na,a,1\n", "self-loop"),
    "edges_twice.csv": ("source,target,weight\na,b,1\na,b,2\n", "listed twice"),
    "edges_short.csv": ("source,target,weight\na\n", "row 2"),
    "edges_noname.csv": ("source,target\na,\n", "empty node name"),
    "bad.dot": ("digraph { a -> ; }\n", "not a valid DOT graph"),
    "undirected.dot": ("graph { a -- b; }\n", "undirected"),
    "nan.dot": ('digraph { a -> b [weight_value="nan"]; }\n', "non-finite"),
    "broken.json": ('{"graph": ', "not valid JSON"),
    "nograph.json": ('{"nodes_x": []}', "no 'graph' object"),
    "notlist.json": ('{"graph": {"nodes": "ab", "edges": []}}', "must be JSON lists"),
    "noedgekey.json": ('{"graph": {"nodes": ["a"], "edges": [{"source": "a"}]}}', "edge 0 needs"),
    "weightstr.json": ('{"graph": {"nodes": ["a","b"], "edges": [{"source": "a", "target": "b", "weight": "x"}]}}',
                       "non-numeric weight"),
    "unknown.json": ('{"graph": {"nodes": ["a"], "edges": [{"source": "a", "target": "z"}]}}', "unknown nodes"),
    "dupnode.json": ('{"graph": {"nodes": ["a", "a"], "edges": []}}', "duplicate node names"),
}


@pytest.mark.parametrize("fname", sorted(MALFORMED))
def test_malformed_file_names_the_file(tmp_path, capsys, fname):
    text, message = MALFORMED[fname]
    p = tmp_path / fname
    p.write_text(text, encoding="utf-8")
    with pytest.raises(InputDataError, match=message) as info:
        read_graph(p)
    assert str(info.value).startswith(str(p))
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # the library never prints (pydot would, on a parse error)


def test_missing_file_directory_and_binary(tmp_path):
    with pytest.raises(InputDataError, match="file not found"):
        read_graph(tmp_path / "nope.csv")
    with pytest.raises(InputDataError, match="is a directory"):
        read_graph(tmp_path)
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(InputDataError, match="not a text file"):
        read_graph(p)
