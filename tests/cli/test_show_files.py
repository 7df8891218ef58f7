"""``bnsl show FILE``: a graph file of any format ``bnsl evaluate`` reads is drawn (issue 29: ``bnsl show
adjacency.csv`` said "not valid JSON"); a bad file is one line naming it, exit 3, no traceback and no
file written."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from bnsl_cli.io.dot import dot_text
from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.io.graphs import adjacency_csv_text, edges_csv_text, graph_to_json
from tests._cli import run
from tests._shards import TINY

pytest.importorskip("matplotlib")

NAMES = ["raf", "mek", "erk", "akt", "pka"]


def _W():
    W = np.zeros((5, 5))
    W[0, 1], W[1, 2], W[4, 0], W[4, 3], W[3, 2] = 1.2, -0.7, 0.4, 2.5, -0.05
    return W


def _one_line_error(res, code=3):
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.output
    return lines[0]


def _edge_ids(svg_path) -> set:
    return {el.get("id") for el in ET.fromstring(svg_path.read_bytes()).iter()
            if (el.get("id") or "").startswith("edge-")}


def _texts(svg_path) -> list:
    return ["".join(el.itertext()) for el in ET.fromstring(svg_path.read_bytes()).iter() if el.tag.endswith("}text")]


def _files():
    W = _W()
    edges = [(NAMES[i], NAMES[j]) for i, j in zip(*np.nonzero(W))]
    return {
        "adjacency.csv": adjacency_csv_text(W, NAMES),
        "edges.csv": edges_csv_text(W, NAMES),
        "graph.dot": dot_text(W, NAMES),
        "graph.json": json.dumps({"graph": graph_to_json(W, NAMES)}),
        "arcs.csv": '"","from","to"\n' + "".join(f'"{k}","{s}","{t}"\n' for k, (s, t) in enumerate(edges, 1)),
        "tetrad.txt": "Graph Nodes:\n" + ";".join(NAMES) + "\n\nGraph Edges:\n"
                      + "".join(f"{k}. {s} --> {t}\n" for k, (s, t) in enumerate(edges, 1)),
        "amat.csv": "\n".join(",".join("1" if v else "0" for v in row) for row in (W != 0)) + "\n",
    }


@pytest.mark.parametrize("name", sorted(_files()))
def test_every_graph_format_is_drawn(tmp_path, name):
    path = tmp_path / name
    path.write_text(_files()[name], encoding="utf-8")
    res = run("show", path)
    assert res.exit_code == 0, res.output
    stem = path.stem
    made = sorted(p.name for p in tmp_path.iterdir() if p != path)
    assert made == sorted([f"{stem}.html", f"{stem}.png", f"{stem}.svg"])
    assert res.stderr.strip() == f"wrote {tmp_path / (stem + '.svg')}, {tmp_path / (stem + '.png')}, {tmp_path / (stem + '.html')}"
    g = read_graph(path)
    ids = _edge_ids(tmp_path / f"{stem}.svg")
    assert ids == {f"edge-sign{'+' if g.W[i, j] > 0 else '-'}-{i}-{j}" for i, j in zip(*np.nonzero(g.W))}
    assert set(g.names) <= set(_texts(tmp_path / f"{stem}.svg"))
    page = (tmp_path / f"{stem}.html").read_text(encoding="utf-8")
    assert f"bnsl show: {name}" in page and "<h2>Graph</h2>" in page and "Convergence" not in page


def test_a_file_with_out_and_truth(tmp_path):
    est, truth = tmp_path / "est.csv", tmp_path / "truth.csv"
    W = _W()
    est.write_text(adjacency_csv_text(W, NAMES))
    T = (W != 0).astype(float)
    T[0, 1], T[1, 0] = 0.0, 1.0  # raf -> mek reversed in the truth
    truth.write_text(adjacency_csv_text(T, NAMES))
    res = run("show", est, "--truth", truth, "--out", tmp_path / "pics", "-q")
    assert res.exit_code == 0, res.output
    assert res.stderr == ""
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == ["est.html", "est.png", "est.svg"]
    assert "edge-reversed-0-1" in _edge_ids(tmp_path / "pics" / "est.svg")
    assert "Against the truth" in (tmp_path / "pics" / "est.html").read_text(encoding="utf-8")


def test_an_edges_csv_with_strength_is_drawn_by_strength(tmp_path):
    p = tmp_path / "boot.csv"
    p.write_text("source,target,weight,strength,direction\nraf,mek,1.2,0.8,0.75\nmek,erk,-3e-06,0.4,1\n")
    res = run("show", p, "--format", "svg", "-q")
    assert res.exit_code == 0, res.output
    assert {"0.80", "0.40"} <= set(_texts(tmp_path / "boot.svg"))


def test_a_report_json_given_as_a_file_is_still_a_run(tmp_path):
    out = tmp_path / "run"
    assert run("learn", TINY / "shards", "--out", out, "--seed", 1, "-q").exit_code == 0
    for p in out.glob("graph.*"):
        if p.suffix != ".dot":
            p.unlink()
    res = run("show", out / "report.json", "--format", "svg,html", "-q")
    assert res.exit_code == 0, res.output
    assert (out / "graph.svg").is_file() and (out / "report.html").is_file()
    assert "Convergence" in (out / "report.html").read_text(encoding="utf-8")
    res = run("show", out / "adjacency.csv", "--format", "svg", "-q")  # the run's graph file, on its own
    assert res.exit_code == 0 and (out / "adjacency.svg").is_file()


BAD = {
    "empty.csv": ("", "file is empty"),
    "blank.dot": ("\n\n", "file is empty"),
    "binary.csv": (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not a text file"),
    "data.csv": ("a,b,c\n" + "".join(f"{k},{k * 2},{k % 3}\n" for k in range(50)), "not a graph file"),
    "selfloop.csv": (",a,b\na,1,0\nb,0,0\n", "self-loop"),
    "short.csv": (",a,b\na,0\n", "expected a 2 x 2 matrix"),
    "bad.json": ('{"graph": {"nodes": ["a"], ', "not valid JSON"),
    "nograph.json": ('{"a": 1}', "no 'graph' object"),
    "bad.dot": ("digraph { a -> ; }", "not a valid DOT graph"),
    "undirected.dot": ("graph { a -- b }", "undirected"),
    "badweight.csv": ("source,target,weight\na,b,heavy\n", "not a number"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_graph_file_is_one_line_exit_3_and_writes_nothing(tmp_path, name):
    content, what = BAD[name]
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    line = _one_line_error(run("show", path))
    assert str(path) in line and what in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_missing_file_is_one_line(tmp_path):
    line = _one_line_error(run("show", tmp_path / "nope.csv"))
    assert "nope.csv" in line and "not found" in line
