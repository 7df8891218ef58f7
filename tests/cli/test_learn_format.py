"""`bnsl learn --format`: the learned graph as a bnlearn model string and a dagitty graph (issue 46, item 6),
read back by bnsl's own readers (and by pgmpy where it is installed)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bnsl_cli.errors import InputDataError, OptionError
from bnsl_cli.io.graph_export import check_names, dagitty_text, parse_formats
from bnsl_cli.io.graph_formats import read_graph
from tests._cli import run


def _adjacency(folder):
    g = read_graph(folder / "adjacency.csv")
    return g.W, list(g.names)


def test_the_run_folder_gets_both_formats_and_they_read_back_as_the_learned_graph(shards, tmp_path):
    out = tmp_path / "run"
    res = run("learn", shards, "--seed", 1, "--format", "modelstring", "--format", "dagitty", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    W, names = _adjacency(out)
    assert W.any()
    for name in ("graph.modelstring", "graph.dagitty"):
        g = read_graph(out / name)
        assert list(g.names) == names
        assert np.array_equal(g.W != 0, W != 0), name
    # every edge of the dagitty file carries the adjacency's weight exactly (shortest round-trip text)
    text = (out / "graph.dagitty").read_text()
    betas = {(a, b): float(w) for a, b, w in re.findall(r"^(\S+) -> (\S+) \[beta=(\S+)\]$", text, re.M)}
    assert len(betas) == int((W != 0).sum())
    for (a, b), w in betas.items():
        assert w == W[names.index(a), names.index(b)]
    # every node listed, the isolated ones too
    assert all(re.search(rf"^{n}$", text, re.M) for n in names)


def test_one_format_without_out_is_printed_in_place_of_the_edge_list(shards, tmp_path):
    out = tmp_path / "run"
    assert run("learn", shards, "--seed", 1, "--format", "modelstring,dagitty", "--out", out, "-q").exit_code == 0
    for fmt in ("modelstring", "dagitty"):
        res = run("learn", shards, "--seed", 1, "--format", fmt, "-q")
        assert res.exit_code == 0, res.output
        assert res.stdout == (out / f"graph.{fmt}").read_text()


def test_a_later_run_without_format_removes_the_stale_files(shards, tmp_path):
    out = tmp_path / "run"
    assert run("learn", shards, "--seed", 1, "--format", "dagitty", "--out", out, "-q").exit_code == 0
    assert (out / "graph.dagitty").is_file()
    assert run("learn", shards, "--seed", 1, "--out", out, "-q").exit_code == 0
    assert not (out / "graph.dagitty").exists()


@pytest.mark.parametrize("args, message", [
    (["--format", "bif"], "--format 'bif': choose from modelstring, dagitty"),
    (["--format", "modelstring,dagitty"], "without --out only one format can go to standard output"),
    (["--format", "dagitty", "--json"], "--format dagitty (without --out) and --json both write to standard output"),
    (["--format", "dagitty", "--edges", "-"], "and --edges both write to standard output"),
    (["--format", "dagitty", "--method", "local-notears"], "local-notears learns one graph per participant"),
])
def test_format_misuse_is_one_line_and_exit_2(shards, args, message):
    res = run("learn", shards, "--seed", 1, *args, "-q")
    assert res.exit_code == 2, res.output
    assert message in res.stderr and "Traceback" not in res.output
    assert res.stdout == ""


def test_a_name_the_format_cannot_hold_is_refused_before_learning_and_nothing_is_written(tmp_path):
    data = tmp_path / "site.csv"
    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    rows = "\n".join(f"{a:.6f},{b:.6f}" for a, b in zip(x, 0.8 * x + rng.normal(size=200)))
    data.write_text("blood pressure,age\n" + rows + "\n")
    out = tmp_path / "run"
    res = run("learn", data, "--format", "modelstring", "--out", out, "-q")
    assert res.exit_code == 3, res.output
    assert "site.csv: column 'blood pressure' cannot be written with --format modelstring" in res.stderr
    assert not out.exists()
    # dagitty quotes it, and both bnsl and the model string's reader agree on the graph
    res = run("learn", data, "--format", "dagitty", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    assert '"blood pressure"' in (out / "graph.dagitty").read_text()
    assert list(read_graph(out / "graph.dagitty").names) == ["blood pressure", "age"]


def test_local_notears_writes_one_file_per_participant(shards, tmp_path):
    out = tmp_path / "run"
    res = run("learn", shards, "--method", "local-notears", "--format", "modelstring", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    parts = sorted(out.glob("participant-*/graph.modelstring"))
    assert len(parts) == len(list(shards.glob("*.csv")))
    for p in parts:
        g = read_graph(p)
        assert np.array_equal(g.W != 0, read_graph(p.parent / "adjacency.csv").W != 0)


def test_a_mixed_run_writes_no_coefficient_for_a_categorical_node(tmp_path):
    sim = tmp_path / "sim"
    res = run("simulate", "-d", 6, "-e", 6, "-p", 2, "-n", 1500, "--categorical", 0.5, "--seed", 3, "--out", sim, "-q")
    assert res.exit_code == 0, res.output
    out = tmp_path / "run"
    res = run("learn", sim / "shards", "--seed", 1, "--format", "dagitty", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    text = (out / "graph.dagitty").read_text()
    assert "->" in text and "beta" not in text
    assert np.array_equal(read_graph(out / "graph.dagitty").W != 0, read_graph(out / "adjacency.csv").W != 0)


def test_dagitty_text_quotes_what_is_not_a_plain_name_and_writes_undirected_edges_once():
    W = np.array([[0, 0.5, 1.0], [0, 0, 0], [2.0, 0, 0]])
    text = dagitty_text(W, ["a", "2nd", "dag"])
    assert text.splitlines() == ["pdag {", "a", '"2nd"', '"dag"', 'a -> "2nd" [beta=0.5]', 'a -- "dag"', "}"]
    assert dagitty_text(W, ["a", "b", "c"], weights=False).splitlines()[4] == "a -> b"
    with pytest.raises(ValueError, match="double quote"):
        dagitty_text(np.zeros((1, 1)), ['say "hi"'])


def test_format_names_and_column_checks():
    assert parse_formats(["dagitty", "modelstring, DAGITTY"]) == ("dagitty", "modelstring")
    assert parse_formats(None) == ()
    with pytest.raises(OptionError):
        parse_formats(["json"])
    check_names(("dagitty",), ["a b", "ü"])
    with pytest.raises(InputDataError, match=r"f\.csv: column 'a\|b'"):
        check_names(("modelstring",), ["a|b"], "f.csv")


def test_pgmpy_reads_the_dagitty_file_as_a_linear_gaussian_network(shards, tmp_path):
    pgmpy_base = pytest.importorskip("pgmpy.base")
    out = tmp_path / "run"
    assert run("learn", shards, "--seed", 1, "--format", "dagitty", "--out", out, "-q").exit_code == 0
    W, names = _adjacency(out)
    model = pgmpy_base.DAG.from_dagitty(filename=str(out / "graph.dagitty"))
    assert sorted(model.edges()) == sorted((names[i], names[j]) for i, j in zip(*np.nonzero(W)))
    assert type(model).__name__ == "LinearGaussianBayesianNetwork"
