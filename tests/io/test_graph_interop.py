"""Reading bnlearn-repository BIF (also gzipped), bnlearn model strings and dagitty graphs (issue 46,
item 6), writing a model string that reads back, and ``bnsl evaluate`` / ``bnsl show`` on them."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app
from bnsl_cli.errors import InputDataError
from bnsl_cli.io.graph_formats import bnlearn_model_string, read_graph, read_graphs

runner = CliRunner()

ASIA_BIF = """network unknown {
}
variable asia {
  type discrete [ 2 ] { yes, no };
}
variable tub {
  type discrete [ 2 ] { yes, no };
  property "a comment { with braces } and // slashes";
}
variable smoke.2 {
  type discrete [ 2 ] { yes, no };
}
variable lung-cancer {
  type discrete [ 2 ] { yes, no };
}
variable either_one {
  type discrete [ 2 ] { yes, no };
}
// a comment: probability ( ghost | asia ) { }
probability ( asia ) {
  table 0.01, 0.99;
}
probability ( tub | asia ) {
  (yes) 0.05, 0.95;
  (no) 0.01, 0.99;
}
probability ( smoke.2 ) {
  table 0.5, 0.5;
}
probability ( lung-cancer | smoke.2 ) {
  (yes) 0.1, 0.9;
  (no) 0.01, 0.99;
}
probability ( either_one | lung-cancer, tub ) {
  (yes, yes) 1.0, 0.0;
  (no, yes) 1.0, 0.0;
  (yes, no) 1.0, 0.0;
  (no, no) 0.0, 1.0;
}
"""
BIF_NAMES = ("asia", "tub", "smoke.2", "lung-cancer", "either_one")
BIF_EDGES = {("asia", "tub"), ("smoke.2", "lung-cancer"), ("lung-cancer", "either_one"), ("tub", "either_one")}

ASIA_MODEL = "[asia][smoke][tub|asia][lung|smoke][bronc|smoke][either|tub:lung][xray|either][dysp|bronc:either]"
ASIA_NAMES = ("asia", "smoke", "tub", "lung", "bronc", "either", "xray", "dysp")
ASIA_EDGES = {
    ("asia", "tub"), ("smoke", "lung"), ("smoke", "bronc"), ("tub", "either"), ("lung", "either"),
    ("either", "xray"), ("bronc", "dysp"), ("either", "dysp"),
}

DAGITTY = """dag {
bb="0,0,1,1"
"my node" [exposure,pos="0.1,0.2"]
a -> b  c <- d ; e [outcome]
x -> {y z}
{p "q r"} -> s <- t
"my node" -> a
}
"""
DAGITTY_NAMES = ("my node", "a", "b", "c", "d", "e", "x", "y", "z", "p", "q r", "s", "t")
DAGITTY_EDGES = {
    ("a", "b"), ("d", "c"), ("x", "y"), ("x", "z"), ("p", "s"), ("q r", "s"), ("t", "s"), ("my node", "a"),
}


def _edges(g) -> set:
    assert set(np.unique(g.W)) <= {0.0, 1.0}
    return {(g.names[i], g.names[j]) for i, j in zip(*np.nonzero(g.W))}


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _edges_csv(tmp_path, edges, name="est.csv"):
    return _write(tmp_path, name, "source,target\n" + "".join(f"{s},{t}\n" for s, t in sorted(edges)))


# -- BIF ----------------------------------------------------------------------------------------


def test_bif_structure(tmp_path):
    g = read_graph(_write(tmp_path, "asia.bif", ASIA_BIF))
    assert g.names == BIF_NAMES and g.all_nodes_listed
    assert _edges(g) == BIF_EDGES


def test_bif_gz_and_bif_by_content(tmp_path):
    gz = tmp_path / "asia.bif.gz"
    gz.write_bytes(gzip.compress(ASIA_BIF.encode()))
    plain = _write(tmp_path, "network.txt", "// Bayesian network\n" + ASIA_BIF)  # no .bif: by content
    for p in (gz, plain):
        g = read_graph(p)
        assert g.names == BIF_NAMES and _edges(g) == BIF_EDGES
    assert [k for k, _ in read_graphs(gz)] == [None]


def test_bif_undeclared_variable_is_named(tmp_path):
    p = _write(tmp_path, "bad.bif", ASIA_BIF.replace("( tub | asia )", "( tub | dysp )"))
    with pytest.raises(InputDataError, match=r"bad\.bif: line \d+: .*'dysp'.* not declared"):
        read_graph(p)
    p = _write(tmp_path, "child.bif", ASIA_BIF + "probability ( ghost ) {\n table 0.5, 0.5;\n}\n")
    with pytest.raises(InputDataError, match=r"child\.bif: .*'ghost'"):
        read_graph(p)


@pytest.mark.parametrize("text, words", [
    (ASIA_BIF.replace("variable tub {", "variable asia {"), "declared twice"),
    (ASIA_BIF[:-3], "not closed"),
    (ASIA_BIF + "potential ( a ) { }\n", "unexpected 'potential'"),
    ("network unknown {\n}\n", "without 'variable"),
])
def test_bad_bif(tmp_path, text, words):
    with pytest.raises(InputDataError, match=words) as exc:
        read_graph(_write(tmp_path, "x.bif", text))
    assert str(exc.value).startswith(str(tmp_path / "x.bif")) and "\n" not in str(exc.value)


def test_corrupt_gzip_is_one_line(tmp_path):
    p = tmp_path / "x.bif.gz"
    p.write_bytes(gzip.compress(ASIA_BIF.encode())[:40])
    with pytest.raises(InputDataError, match=r"x\.bif\.gz: not a valid gzip file"):
        read_graph(p)


# -- bnlearn model strings ----------------------------------------------------------------------


def test_model_string_asia_by_content(tmp_path):
    spread = ASIA_MODEL.replace("][", "]\n  [").replace("|", " | ").replace(":", " : ") + "\n"
    for text in (ASIA_MODEL, spread):
        g = read_graph(_write(tmp_path, "asia.txt", text))
        assert g.names == ASIA_NAMES
        assert _edges(g) == ASIA_EDGES
    g = read_graph(_write(tmp_path, "asia.modelstring", f'"{ASIA_MODEL}"'))  # as R prints it
    assert _edges(g) == ASIA_EDGES


def test_model_string_written_reads_back(tmp_path):
    g = read_graph(_write(tmp_path, "asia.txt", ASIA_MODEL))
    text = bnlearn_model_string(g.W, g.names)
    assert text == ASIA_MODEL
    back = read_graph(_write(tmp_path, "back.modelstring", text))
    assert back.names == g.names and np.array_equal(back.W, g.W)
    # another order, weights and an undirected pair: parents in the order of the names
    names = ["c", "a", "b"]
    W = np.array([[0, 0.5, 0], [3.0, 0, -2.0], [0, 0, 0]])  # c - a undirected (both ways), a -> b
    text = bnlearn_model_string(W, names)
    assert text == "[c|a][a|c][b|a]"
    back = read_graph(_write(tmp_path, "w.txt", text))
    assert back.names == tuple(names) and np.array_equal(back.W, (W != 0).astype(float))
    with pytest.raises(ValueError, match="'a b'"):
        bnlearn_model_string(np.zeros((1, 1)), ["a b"])


@pytest.mark.parametrize("text, words", [
    ("[a][b|a:zzz]", r"parent 'zzz' of 'b' is not a node"),
    ("[a][b|a][a]", r"node 'a' appears twice"),
    ("[a][b|a", r"not a bnlearn model string"),
    ("[a][b|]", r"\[b\|\] is not"),
    ("[a|a]", r"self-loop on node 'a'"),
])
def test_bad_model_string(tmp_path, text, words):
    p = _write(tmp_path, "m.txt", text)
    with pytest.raises(InputDataError, match=words) as exc:
        read_graph(p)
    assert str(exc.value).startswith(str(p)) and "\n" not in str(exc.value)


def test_json_lists_are_still_json(tmp_path):
    for text in ("[1]", '["a"]', "[{]"):
        with pytest.raises(InputDataError, match="JSON"):
            read_graph(_write(tmp_path, "x.txt", text))


# -- dagitty ------------------------------------------------------------------------------------


def test_dagitty_groups_attributes_quotes_and_back_arrows(tmp_path):
    for name in ("g.dagitty", "g.txt"):  # by extension, and by content
        g = read_graph(_write(tmp_path, name, DAGITTY))
        assert g.names == DAGITTY_NAMES and g.all_nodes_listed
        assert _edges(g) == DAGITTY_EDGES


def test_dagitty_headers_chains_and_undirected(tmp_path):
    g = read_graph(_write(tmp_path, "p.txt", "pdag G1 { a -> b -> c; c -- d\n{e f} -- g }"))
    assert g.names == ("a", "b", "c", "d", "e", "f", "g")
    assert _edges(g) == {("a", "b"), ("b", "c"), ("c", "d"), ("d", "c"),
                         ("e", "g"), ("g", "e"), ("f", "g"), ("g", "f")}
    g = read_graph(_write(tmp_path, "u.dagitty", "graph { a -- b  c }"))  # graph {: by extension only
    assert g.names == ("a", "b", "c") and _edges(g) == {("a", "b"), ("b", "a")}


def test_graph_header_without_dagitty_extension_is_still_dot(tmp_path):
    with pytest.raises(InputDataError, match="undirected"):
        read_graph(_write(tmp_path, "u.txt", "graph { a -- b }"))


@pytest.mark.parametrize("text, words", [
    ("dag { a -> b\n c <-> d }", r"line 2: bidirected edge c <-> d is not supported"),
    ("dag { a -> }", r"expected a node name"),
    ("dag { a -> b", r"not closed"),
    ("dag { a -> b } x", r"text after the closing"),
    ("mag { a -> b }", r"'mag' graphs .* not supported"),
    ("dag { a -> a }", r"self-loop"),
])
def test_bad_dagitty(tmp_path, text, words):
    p = _write(tmp_path, "d.dagitty", text)
    with pytest.raises(InputDataError, match=words) as exc:
        read_graph(p)
    assert str(exc.value).startswith(str(p)) and "\n" not in str(exc.value)


# -- through the CLI ----------------------------------------------------------------------------


def _evaluate(*args):
    return runner.invoke(app, ["evaluate", *map(str, args), "--json"])


@pytest.mark.parametrize("name, text, edges", [
    ("truth.bif", ASIA_BIF, BIF_EDGES),
    ("truth.dagitty", DAGITTY, DAGITTY_EDGES),
    ("truth.txt", ASIA_MODEL, ASIA_EDGES),
])
def test_evaluate_against_each_format(tmp_path, name, text, edges):
    truth = _write(tmp_path, name, text)
    est = _edges_csv(tmp_path, edges)
    res = _evaluate(est, "--truth", truth)
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)[0]
    assert row["shd"] == 0 and row["tp"] == len(edges) and row["d"] == len(read_graph(truth).names)
    # and a wrong estimate is seen as wrong: one edge reversed
    s, t = min(edges)
    wrong = _edges_csv(tmp_path, (edges - {(s, t)}) | {(t, s)}, "wrong.csv")
    row = json.loads(_evaluate(wrong, "--truth", truth).stdout)[0]
    assert row["shd"] == 1 and row["reversed"] == 1


@pytest.mark.parametrize("name, text, words", [
    ("bad.bif", ASIA_BIF.replace("( tub | asia )", "( tub | dysp )"), "'dysp'"),
    ("bad.txt", "[a][b|a:zzz]", "'zzz'"),
    ("bad.dagitty", "dag { a -> b  b <-> c }", "b <-> c"),
])
def test_evaluate_bad_truth_is_one_line_exit_3(tmp_path, name, text, words):
    truth = _write(tmp_path, name, text)
    est = _edges_csv(tmp_path, {("a", "b")})
    res = _evaluate(est, "--truth", truth)
    assert res.exit_code == 3, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {truth}:") and words in lines[0], res.stderr
    assert "Traceback" not in res.output and res.stdout == ""


def test_show_draws_a_bif_gz_and_a_dagitty(tmp_path):
    pytest.importorskip("matplotlib")
    gz = tmp_path / "asia.bif.gz"
    gz.write_bytes(gzip.compress(ASIA_BIF.encode()))
    dg = _write(tmp_path, "g.dagitty", DAGITTY)
    for p, stem in ((gz, "asia.bif"), (dg, "g")):
        res = runner.invoke(app, ["show", str(p), "--format", "svg", "-q"])
        assert res.exit_code == 0, res.output
        assert (tmp_path / f"{stem}.svg").is_file()
