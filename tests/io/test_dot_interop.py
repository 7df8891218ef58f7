"""graph.dot as other tools read it: node names are the ids, the exact weight is ``weight``."""

from __future__ import annotations

import warnings

import numpy as np

from bnsl_cli.io.dot import dot_text
from bnsl_cli.io.graph_formats import read_graph

# names that need quoting in DOT (spaces, punctuation, a leading digit, a keyword, unicode) and plain ones
NAMES = ["x01", "age group", "4", "IL-6", "graph", "é中", "a,b", "Raf_1"]


def _graph():
    rng = np.random.default_rng(7)
    d = len(NAMES)
    W = np.triu(rng.normal(size=(d, d)) * (rng.random((d, d)) < 0.5), 1)
    W[0, 1], W[2, 5], W[1, 7] = -1.8676079808795722, 1e-05, 3.0  # a non-numeral float text, an integer value
    return W


def _unquote(s: str) -> str:
    if len(s) >= 2 and s[0] == s[-1] == '"':
        s = s[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return s


def _edges(W):
    return {(NAMES[i], NAMES[j]): float(W[i, j]) for i, j in zip(*np.nonzero(W))}


def test_pydot_reads_names_as_ids_and_weight():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import pydot

    W = _graph()
    g = pydot.graph_from_dot_data(dot_text(W, NAMES))[0]
    nodes = [_unquote(n.get_name()) for n in g.get_nodes() if n.get_name() not in ("node", "edge", "graph")]
    assert nodes == NAMES
    got = {
        (_unquote(e.get_source()), _unquote(e.get_destination())): float(_unquote(e.get_attributes()["weight"]))
        for e in g.get_edges()
    }
    assert got == _edges(W)


def test_networkx_read_dot_round_trips_names_and_weights(tmp_path):
    import networkx as nx

    # networkx drops node statements named node/edge/graph (it takes them for defaults) and keeps
    # backslash escapes; every other name comes back as written
    names = [n if n != "graph" else "Graph 2" for n in NAMES]
    W = _graph()
    p = tmp_path / "graph.dot"
    p.write_text(dot_text(W, names), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        G = nx.nx_pydot.read_dot(p)
    assert list(G.nodes) == names
    got = {(u, v): float(_unquote(a["weight"])) for u, v, a in G.edges(data=True)}
    assert got == {(names[i], names[j]): float(W[i, j]) for i, j in zip(*np.nonzero(W))}
    assert all("weight_value" not in a for _, _, a in G.edges(data=True))


def test_bnsl_reads_its_dot_and_the_old_label_style(tmp_path):
    W = _graph()
    p = tmp_path / "graph.dot"
    p.write_text(dot_text(W, NAMES), encoding="utf-8")
    back = read_graph(p)
    assert back.names == tuple(NAMES)
    np.testing.assert_array_equal(back.W, W)
    old = tmp_path / "old.dot"  # files written before node names became ids
    old.write_text('digraph bnsl {\n  n0 [label="a b"];\n  n1 [label="c"];\n'
                   '  n0 -> n1 [weight_value="-0.5", label="-0.5"];\n}\n', encoding="utf-8")
    g = read_graph(old)
    assert g.names == ("a b", "c") and g.W[0, 1] == -0.5


def test_dot_ids_are_bare_only_when_plain():
    text = dot_text(np.array([[0.0, 2.5], [0.0, 0.0]]), ["x01", "age group"])
    assert '  x01 -> "age group" [weight=2.5,' in text
    assert "label=" not in text.split("->")[0]  # no node labels: the id is the name
