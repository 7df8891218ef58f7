"""--require-file / --forbid-file take whole graphs too: a BIF file, a bnlearn model string, a dagitty
graph (issue 46, item 6), each edge an arc."""

from __future__ import annotations


import pytest

from bnsl_cli.errors import OptionError
from bnsl_cli.io.graph_text_formats import graph_arcs
from bnsl_cli.knowledge import KnowledgeSource
from tests._cli import run
from tests._shards import TINY

BIF = """network tiny { }
variable x1 { type discrete [ 2 ] { a, b }; }
variable x2 { type discrete [ 2 ] { a, b }; }
variable x4 { type discrete [ 2 ] { a, b }; }
probability ( x1 ) { table 0.5, 0.5; }
probability ( x4 | x1 ) { (a) 0.5, 0.5; (b) 0.5, 0.5; }
probability ( x2 | x4 ) { (a) 0.5, 0.5; (b) 0.5, 0.5; }
"""


@pytest.mark.parametrize("name, text", [
    ("k.bif", BIF),
    ("k.txt", "[x1][x4|x1][x2|x4]"),
    ("k.dagitty", "dag { x1 -> x4 -> x2 }"),
])
def test_a_graph_file_is_read_as_arcs(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    src = KnowledgeSource.from_options(require_files=[p], graph_arcs=graph_arcs)
    assert sorted((r.a, r.b) for r in src.rules) == [("x1", "x4"), ("x4", "x2")]
    k = src.resolve(["x1", "x2", "x3", "x4"])
    assert k.required_mask()[0, 3] and k.required_mask()[3, 1]


def test_without_the_reader_a_graph_file_is_still_a_csv_error(tmp_path):
    p = tmp_path / "k.txt"
    p.write_text("[x1][x4|x1]")
    with pytest.raises(OptionError, match="expected the header 'from,to'"):
        KnowledgeSource.from_options(require_files=[p])


def test_an_undirected_dagitty_edge_is_refused(tmp_path):
    p = tmp_path / "k.dagitty"
    p.write_text("dag { x1 -- x4 }")
    with pytest.raises(OptionError, match="x1 -- x4 is undirected"):
        KnowledgeSource.from_options(forbid_files=[p], graph_arcs=graph_arcs)


def test_learn_takes_a_model_string_and_a_gzipped_bif(tmp_path):
    ms = tmp_path / "req.txt"
    ms.write_text("[x1][x3][x4][x5][x6][x2|x6]")
    res = run("learn", TINY / "shards", "--require-file", ms, "-q", "--seed", 1)
    assert res.exit_code == 0, res.output
    assert "x6,x2," in res.stdout
    forbid = tmp_path / "forbid.txt"
    forbid.write_text("[x1][x2][x3][x4|x1][x5][x6]")  # x1 -> x4 is in the run's graph without it
    res = run("learn", TINY / "shards", "--forbid-file", forbid, "-q", "--seed", 1)
    assert res.exit_code == 0 and "x1,x4," not in res.stdout, res.output
    bad = tmp_path / "bad.txt"
    bad.write_text("[x1][nope|x1]")
    res = run("learn", TINY / "shards", "--require-file", bad, "-q")
    assert res.exit_code == 2 and "nope" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.output
