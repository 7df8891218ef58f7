"""``--require`` / ``--forbid`` / ``--knowledge`` / ``--require-file`` / ``--forbid-file`` on the command line."""

import json

import pytest

from tests._cli import run


def _edges(out):
    return {(r["source"], r["target"]) for r in json.loads((out / "report.json").read_text())["graph"]["edges"]}


def test_learn_honours_a_knowledge_file_and_reports_it(tmp_path, shards):
    plain = tmp_path / "plain"
    res = run("learn", shards, "--out", plain, "--seed", 1, "-q")
    assert res.exit_code == 0, res.output
    edges = _edges(plain)
    assert "knowledge" not in json.loads((plain / "report.json").read_text())
    a, b = sorted(edges)[0]
    assert ("x1", "x8") not in edges
    k = tmp_path / "k.txt"
    k.write_text(f"# known\nforbid {a} -> {b}\nforbid {b} -> {a}\nrequire x1 -> x8\n")
    out = tmp_path / "k"
    res = run("learn", shards, "--out", out, "--seed", 1, "--knowledge", k)
    assert res.exit_code == 0, res.output
    got = _edges(out)
    assert (a, b) not in got and (b, a) not in got and ("x1", "x8") in got
    rep = json.loads((out / "report.json").read_text())["knowledge"]
    assert rep["required"] == [["x1", "x8"]] and rep["forbidden_count"] == 2 and rep["forbidden_in_graph"] == 0
    assert "knowledge: 1 required, 2 forbidden, 0 tiers" in res.stderr
    # the same as command-line options and as bnlearn lists
    wl, bl = tmp_path / "wl.csv", tmp_path / "bl.csv"
    wl.write_text("from,to\nx1,x8\n")
    bl.write_text(f"from,to\n{a},{b}\n{b},{a}\n")
    for extra in (("--require", "x1->x8", "--forbid", f"{a}->{b}", "--forbid", f"{b} -> {a}"),
                  ("--require-file", wl, "--forbid-file", bl)):
        o = tmp_path / f"o{len(extra)}"
        res = run("learn", shards, "--out", o, "--seed", 1, "-q", *extra)
        assert res.exit_code == 0, res.output
        assert (o / "adjacency.csv").read_bytes() == (out / "adjacency.csv").read_bytes()


def test_tiers_on_the_command_line(tmp_path, shards):
    k = tmp_path / "k.txt"
    k.write_text("tier 1: x4\ntier 2: x1 x2 x3 x5 x6 x7 x8\n")
    out = tmp_path / "o"
    res = run("learn", shards, "--out", out, "--seed", 1, "-q", "-m", "notears", "--knowledge", k)
    assert res.exit_code == 0, res.output
    assert not any(t == "x4" for _, t in _edges(out))


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--require", "x1->x2", "--forbid", "x1->x2"), "--require x1->x2: x1 -> x2 is required but also forbidden (--forbid x1->x2)"),
        (("--require", "x1->x2", "--require", "x2->x1"), "the required edges form a cycle"),
        (("--require", "x1->nope"), "unknown variable 'nope'"),
        (("--forbid", "x1=>x2"), "--forbid x1=>x2: expected an edge 'A->B'"),
    ],
)
def test_contradictions_exit_2_with_one_line_and_no_output(tmp_path, shards, args, needle):
    out = tmp_path / "o"
    res = run("learn", shards, "--out", out, "--seed", 1, *args)
    assert res.exit_code == 2, res.output
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert not out.exists() or not any(out.iterdir())


def test_a_bad_knowledge_file_names_its_line(tmp_path, shards):
    k = tmp_path / "k.txt"
    k.write_text("require x1 -> x2\nrequire x2 -> x1 # oops\n")
    res = run("learn", shards, "--knowledge", k)
    assert res.exit_code == 2
    assert f"{k}:" in res.stderr and "cycle" in res.stderr


def test_serve_offers_the_knowledge_options():
    res = run("serve", "--help")
    assert res.exit_code == 0
    for opt in ("--require", "--forbid", "--knowledge", "--require-file", "--forbid-file"):
        assert opt in res.output
