"""`bnsl show`: graph.svg, graph.png and a self-contained report.html from a learn folder."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from bnsl_cli.io.graph_formats import read_graph
from tests._cli import run
from tests._shards import TINY

pytest.importorskip("matplotlib")


def _one_line_error(res, code):
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.output
    return lines[0]


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("show") / "run"
    res = run("learn", TINY / "shards", "--out", out, "-m", "fed-sparse", "--dp", "--epsilon", 5, "--seed", 1, "--rounds", 20, "-q")
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture()
def run_dir(dp_run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(dp_run, dst)
    return dst


def _svg_texts(svg: bytes) -> list:
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return ["".join(el.itertext()) for el in root.iter() if el.tag.endswith("}text")]


def _svg_ids(svg: bytes) -> set:
    return {el.get("id") for el in ET.fromstring(svg).iter() if el.get("id")}


def _png_size(data: bytes) -> tuple:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.imgs, self.refs, self.headings, self._h = [], [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        for k in ("src", "href", "data", "action"):
            if a.get(k):
                self.refs.append(a[k])
        self._h = tag == "h2"

    def handle_data(self, data):
        if self._h:
            self.headings.append(data.strip())
            self._h = False


def test_show_writes_valid_svg_png_and_a_self_contained_page(run_dir):
    res = run("show", run_dir)
    assert res.exit_code == 0, res.output
    names = read_graph(run_dir / "adjacency.csv").names
    svg = (run_dir / "graph.svg").read_bytes()
    texts = _svg_texts(svg)
    for n in names:
        assert n in texts
    W = read_graph(run_dir / "adjacency.csv").W
    edge_ids = {i for i in _svg_ids(svg) if i.startswith("edge-")}
    assert len(edge_ids) == int((W != 0).sum())  # one arrow per edge, coloured by sign
    for i, j in zip(*np.nonzero(W)):
        assert f"edge-sign{'+' if W[i, j] > 0 else '-'}-{i}-{j}" in edge_ids
    w, h = _png_size((run_dir / "graph.png").read_bytes())
    assert 200 <= w <= 8000 and 150 <= h <= 8000
    page_text = (run_dir / "report.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(page_text)
    page.close()
    assert page.tags[0] == "html" and "body" in page.tags
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert all(r.startswith("data:") for r in page.refs), page.refs  # nothing fetched from anywhere
    assert not re.search(r"https?://", page_text)
    graph_img = base64.b64decode(page.imgs[0].split(",", 1)[1])
    assert page.imgs[0].startswith("data:image/svg+xml;base64,") and set(names) <= set(_svg_texts(graph_img))
    for h in ("Graph", "Convergence", "Communication", "Privacy", "Settings"):
        assert h in page.headings
    rep = json.loads((run_dir / "report.json").read_text())
    for p in rep["privacy"]["participants"]:
        assert f"<td>{p['file']}</td>" in page_text
    assert len(page.imgs) >= 5  # graph, h/gap, edges, bytes, privacy


def test_format_and_out_choose_what_and_where(run_dir, tmp_path):
    out = tmp_path / "pics" / "sub"
    res = run("show", run_dir, "--format", "png", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["graph.png"]
    assert not (run_dir / "graph.png").exists()
    assert res.stderr == ""


def test_bad_format_is_a_usage_error(run_dir):
    res = run("show", run_dir, "--format", "svg,pdf")
    _one_line_error(res, 2)
    assert "pdf" in res.stderr
    assert not (run_dir / "graph.svg").exists()


def test_svg_is_the_same_for_the_same_run(run_dir, tmp_path):
    assert run("show", run_dir, "--format", "svg", "--out", tmp_path / "a", "-q").exit_code == 0
    assert run("show", run_dir, "--format", "svg", "--out", tmp_path / "b", "-q").exit_code == 0
    assert (tmp_path / "a" / "graph.svg").read_bytes() == (tmp_path / "b" / "graph.svg").read_bytes()


def test_truth_marks_true_extra_reversed_and_missing(run_dir, tmp_path):
    truth = read_graph(TINY / "truth.csv")
    names = list(truth.names)
    T = truth.W != 0
    edges = [tuple(map(int, e)) for e in zip(*np.nonzero(T))]
    assert len(edges) >= 4
    W = T.astype(float) * 0.8
    (a, b), (c, e) = edges[0], edges[1]
    W[a, b] = 0.0  # missing
    W[c, e], W[e, c] = 0.0, -1.2  # reversed
    free = [(i, j) for i in range(len(names)) for j in range(i + 1, len(names)) if not T[i, j] and not T[j, i]]
    W[free[0]] = 0.5  # extra
    rep = json.loads((run_dir / "report.json").read_text())
    rep["graph"] = {"nodes": names, "edges": [{"source": names[i], "target": names[j], "weight": float(W[i, j])}
                                              for i, j in zip(*np.nonzero(W))]}
    (run_dir / "report.json").write_text(json.dumps(rep))
    res = run("show", run_dir, "--truth", TINY / "truth.csv", "--format", "svg,html", "-q")
    assert res.exit_code == 0, res.output
    ids = {i for i in _svg_ids((run_dir / "graph.svg").read_bytes()) if i.startswith("edge-")}
    expected = {f"edge-missing-{a}-{b}", f"edge-reversed-{e}-{c}", f"edge-extra-{free[0][0]}-{free[0][1]}"}
    expected |= {f"edge-true-{i}-{j}" for i, j in edges[2:]}
    assert ids == expected
    texts = _svg_texts((run_dir / "graph.svg").read_bytes())
    assert "missing (1)" in texts and "extra (1)" in texts and "reversed (1)" in texts
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "Against the truth" in page and "<td>shd</td><td>3</td>" in page


def test_truth_with_other_nodes_is_exit_3(run_dir, tmp_path):
    t = tmp_path / "t.csv"
    t.write_text("source,target\nzz,x1\n")
    _one_line_error(run("show", run_dir, "--truth", t), 3)


@pytest.mark.parametrize("case", ["missing", "empty_dir", "bad_json", "not_a_report", "local", "a_bad_file"])
def test_bad_run_dir_is_one_line_exit_3_and_writes_nothing(tmp_path, case):
    d = tmp_path / "r"
    if case != "missing":
        d.mkdir()
    target = d
    if case == "bad_json":
        (d / "report.json").write_text("{not json")
    elif case == "not_a_report":
        (d / "report.json").write_text('{"a": 1}')
    elif case == "local":
        (d / "report.json").write_text('{"method": "local-notears", "graph": null, "local": []}')
    elif case == "a_bad_file":  # a graph file is drawn (tests/cli/test_show_files.py); a bad one is refused
        target = d / "adjacency.csv"
        target.write_text(",a,b\na,0\n")
    res = run("show", target)
    _one_line_error(res, 3)
    assert str(target) in res.stderr or "report" in res.stderr
    if d.exists():
        assert not any(p.name.startswith(("graph.", "report.html", "adjacency.")) and p != target for p in d.iterdir())


def test_missing_matplotlib_is_one_clear_line(run_dir, monkeypatch):
    import sys

    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = run("show", run_dir)
    _one_line_error(res, 1)
    assert "pip install 'bnsl-cli[plots]'" in res.stderr
    assert not (run_dir / "graph.svg").exists() and not (run_dir / "report.html").exists()


def test_local_notears_report_needs_and_takes_a_participant(run_dir):
    rep = json.loads((run_dir / "report.json").read_text())
    names = rep["graph"]["nodes"]
    g1 = {"nodes": names, "edges": [{"source": names[0], "target": names[1], "weight": 0.5}]}
    g2 = {"nodes": names, "edges": [{"source": names[2], "target": names[3], "weight": -0.7},
                                    {"source": names[3], "target": names[4], "weight": 1.1}]}
    rep.update(method="local-notears", graph=None,
               local=[{"participant": 1, "graph": g1}, {"participant": 2, "graph": g2}])
    (run_dir / "report.json").write_text(json.dumps(rep))
    line = _one_line_error(run("show", run_dir), 3)
    assert "--participant" in line
    _one_line_error(run("show", run_dir, "--participant", 3), 3)
    res = run("show", run_dir, "--participant", 2, "--format", "svg", "-q")
    assert res.exit_code == 0, res.output
    ids = {i for i in _svg_ids((run_dir / "graph.svg").read_bytes()) if i.startswith("edge-")}
    assert ids == {"edge-sign--2-3", "edge-sign+-3-4"}


def test_headerless_truth_is_matched_by_position(run_dir, tmp_path):
    g = read_graph(run_dir / "adjacency.csv")
    bare = tmp_path / "amat.csv"
    bare.write_text("\n".join(",".join("1" if v else "0" for v in row) for row in (g.W != 0)) + "\n")
    res = run("show", run_dir, "--truth", bare, "--format", "svg", "-q")
    assert res.exit_code == 0, res.output
    ids = {i for i in _svg_ids((run_dir / "graph.svg").read_bytes()) if i.startswith("edge-")}
    assert ids and all(i.startswith("edge-true-") for i in ids)


def test_a_mixed_run_draws_categorical_nodes_with_their_levels_and_edges_without_a_sign(tmp_path):
    from bnsl_cli.io.draw import graph_geometry

    sim = tmp_path / "sim"
    assert run("simulate", "-d", 6, "-e", 6, "-p", 2, "-n", 600, "--categorical", 0.5, "--seed", 3, "--out", sim,
               "-q").exit_code == 0
    out = tmp_path / "run"
    assert run("learn", sim / "shards", "--seed", 1, "--out", out, "-q").exit_code == 0
    res = run("show", out, "-q")
    assert res.exit_code == 0, res.output
    svg = (out / "graph.svg").read_text()
    rep = json.loads((out / "report.json").read_text())
    cat = {n: len(v) for n, v in rep["columns"]["levels"].items()}
    names = rep["columns"]["names"]
    edges = [(e["source"], e["target"]) for e in rep["graph"]["edges"]]
    assert edges, "the run learned no edge"
    for a, b in edges:
        i, j = names.index(a), names.index(b)
        kind = "categorical" if a in cat or b in cat else "sign[+-]"
        assert re.search(f'id="edge-{kind}-{i}-{j}"', svg), (a, b)
    W = np.zeros((3, 3))
    W[0, 1], W[1, 2] = 1.0, -0.5
    geo = graph_geometry(W, ["g", "x", "y"], levels={"g": 3})
    assert geo.names == ("g (3)", "x", "y")
    assert [(e.sign, e.label) for e in geo.edges] == [(0, None), (-1, geo.edges[1].label)]
    assert geo.edges[1].label is not None
