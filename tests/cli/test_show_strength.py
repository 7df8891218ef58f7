"""What ``bnsl show``'s arrows say: the edges' strength when the run has one (``bnsl learn --bootstrap``:
``strength``/``direction`` columns in edges.csv, or strength.csv), else the standardised weights
W[i, j]·sd(i)/sd(j) from the report's column spreads, else the weights with widths by rank; labels of
2 significant digits and never an exponent (issue 29: wine's 256 next to 0.000453, labels like
``-1.04e-05``)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from bnsl_cli.io.graph_formats import read_graph
from tests._cli import run
from tests._shards import TINY

pytest.importorskip("matplotlib")

from bnsl_cli.io.draw import edge_emphasis, short_number

NAMES = ["alcohol", "malic", "ash", "proline"]
# raw weights in wildly different units (wine: proline in the hundreds, malic acid in single digits)
EDGES = [("alcohol", "malic", 0.8), ("malic", "ash", -1.5), ("alcohol", "proline", 256.0), ("ash", "proline", 0.000453)]
SD = {"alcohol": 0.81, "malic": 1.12, "ash": 0.27, "proline": 314.9}
#: the fixture edges.csv of a bootstrap run: strength (either way) and direction (this way, given the edge)
STRENGTH_CSV = """source,target,weight,strength,direction
alcohol,malic,0.8,0.97,0.9
malic,ash,-1.5,0.55,0.6
alcohol,proline,256,0.31,1
ash,proline,0.000453,0.12,0.5
"""


def _one_line_error(res, code):
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.output
    return lines[0]


def _write_run(folder, edges=EDGES, sd=True, edges_csv=None):
    """A learn folder by hand: report.json (graph, column spreads), adjacency.csv, edges.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    rep = {
        "schema_version": 1, "method": "fed-sparse", "orientation": "W[i, j] is the edge i -> j",
        "graph": {"nodes": NAMES, "edges": [{"source": s, "target": t, "weight": w} for s, t, w in edges]},
        "data": {"nodes": list(reversed(NAMES))},  # the spreads are matched by name, not by position
    }
    if sd:
        rep["standardize"] = {"applied": False, "sd": [SD[n] for n in reversed(NAMES)]}
    (folder / "report.json").write_text(json.dumps(rep))
    (folder / "edges.csv").write_text(edges_csv or "source,target,weight\n" + "".join(f"{s},{t},{w}\n" for s, t, w in edges))
    return folder


def _svg(path):
    return ET.fromstring(path.read_bytes())


def _labels(root) -> dict:
    """``{(i, j): label text}`` of the arrows' labels."""
    out = {}
    for g in root.iter():
        m = re.fullmatch(r"label-(\d+)-(\d+)", g.get("id") or "")
        if m:
            out[(int(m[1]), int(m[2]))] = "".join(g.itertext()).strip()
    return out


def _arrows(root) -> dict:
    """``{(i, j): (stroke width, opacity)}`` of the arrows' lines."""
    out = {}
    for g in root.iter():
        m = re.fullmatch(r"edge-[^-]+-(\d+)-(\d+)|edge-sign[+-]-(\d+)-(\d+)", g.get("id") or "")
        if m:
            i, j = [int(x) for x in m.groups() if x is not None]
            style = next(iter(g)).get("style")
            width = float(re.search(r"stroke-width: ([\d.]+)", style)[1])
            op = re.search(r"opacity: ([\d.]+)", style)
            out[(i, j)] = (width, float(op[1]) if op else 1.0)
    return out


def _k(s, t):
    return NAMES.index(s), NAMES.index(t)


def test_short_numbers_have_two_digits_and_no_exponent():
    assert short_number(256.0) == "256"
    assert short_number(0.000453) == "0.00045"
    assert short_number(-1.04e-05) == "-0.00001"
    assert short_number(1.48) == "1.5"
    assert short_number(-0.314) == "-0.31"
    assert short_number(12.6) == "13"
    assert short_number(0.0) == "0"
    for v in 10.0 ** np.arange(-9, 7) * 1.2345:
        for x in (v, -v):
            text = short_number(x)
            assert "e" not in text.lower() and float(text) != 0
            assert abs(float(text) - x) <= 0.051 * abs(x) or abs(x) >= 100


def test_strength_column_labels_and_widths(tmp_path):
    folder = _write_run(tmp_path / "run", edges_csv=STRENGTH_CSV)
    res = run("show", folder, "--format", "svg,html", "-q")
    assert res.exit_code == 0, res.output
    root = _svg(folder / "graph.svg")
    labels = _labels(root)
    assert labels == {_k("alcohol", "malic"): "0.97", _k("malic", "ash"): "0.55",
                      _k("alcohol", "proline"): "0.31", _k("ash", "proline"): "0.12"}
    arrows = _arrows(root)
    by_strength = sorted(arrows, key=lambda e: float(labels[e]))
    widths = [arrows[e][0] for e in by_strength]
    opacity = [arrows[e][1] for e in by_strength]
    assert widths == sorted(widths) and len(set(widths)) == 4  # stronger, wider
    assert opacity == sorted(opacity) and opacity[0] < 0.5 < opacity[-1] <= 1.0  # and more opaque
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "strength (share of bootstrap runs" in page


def test_strength_matrix_alone_gives_the_strength(tmp_path):
    folder = _write_run(tmp_path / "run")
    F = np.zeros((4, 4))  # directed frequencies, strength.csv as bnsl learn --bootstrap writes it
    F[_k("alcohol", "malic")], F[_k("malic", "alcohol")] = 0.6, 0.3
    F[_k("malic", "ash")] = 0.5
    F[_k("alcohol", "proline")] = 1.0
    F[_k("ash", "proline")], F[_k("proline", "ash")] = 0.05, 0.15
    F[_k("ash", "alcohol")] = 0.2  # an edge the graph lacks: not drawn
    (folder / "strength.csv").write_text("," + ",".join(NAMES) + "\n" + "".join(
        n + "," + ",".join(f"{v:g}" for v in F[k]) + "\n" for k, n in enumerate(NAMES)))
    res = run("show", folder, "--format", "svg", "-q")
    assert res.exit_code == 0, res.output
    assert _labels(_svg(folder / "graph.svg")) == {_k("alcohol", "malic"): "0.90", _k("malic", "ash"): "0.50",
                                                   _k("alcohol", "proline"): "1.00", _k("ash", "proline"): "0.20"}


def test_without_strength_labels_are_standardised_weights(tmp_path):
    folder = _write_run(tmp_path / "run")
    res = run("show", folder, "--format", "svg,html", "-q")
    assert res.exit_code == 0, res.output
    root = _svg(folder / "graph.svg")
    labels = _labels(root)
    expected = {_k(s, t): short_number(w * SD[s] / SD[t]) for s, t, w in EDGES}
    assert labels == expected
    assert labels[_k("alcohol", "proline")] == "0.66"  # 256 raw: 256 · 0.81 / 314.9
    arrows = _arrows(root)
    std = {_k(s, t): abs(w * SD[s] / SD[t]) for s, t, w in EDGES}
    order = sorted(std, key=std.get)
    assert [arrows[e][0] for e in order] == sorted(arrows[e][0] for e in order)  # width grows with |W_std|
    assert all(arrows[e][1] == 1.0 for e in arrows)  # opacity is for strength only
    assert "standardised weight" in (folder / "report.html").read_text(encoding="utf-8")


def test_without_spreads_widths_follow_the_rank_and_labels_have_no_exponent(tmp_path):
    edges = [("alcohol", "malic", -1.04e-05), ("malic", "ash", 0.5), ("alcohol", "proline", 256.0),
             ("ash", "proline", 0.000453)]
    folder = _write_run(tmp_path / "run", edges=edges, sd=False)
    res = run("show", folder, "--format", "svg", "-q")
    assert res.exit_code == 0, res.output
    root = _svg(folder / "graph.svg")
    labels = _labels(root)
    assert labels == {_k(s, t): short_number(w) for s, t, w in edges}
    assert labels[_k("alcohol", "malic")] == "-0.00001"
    texts = ["".join(el.itertext()) for el in root.iter() if el.tag.endswith("}text")]
    assert not any(re.search(r"\de[-+]?\d", t) for t in texts), texts
    arrows = _arrows(root)
    widths = [arrows[_k(s, t)][0] for s, t, w in sorted(edges, key=lambda e: abs(e[2]))]
    assert widths == sorted(widths) and len(set(widths)) == 4
    assert widths[1] - widths[0] > 0.3  # by rank: 0.0000104 and 0.000453 are not both hairlines next to 256


def test_a_zero_one_graph_has_no_labels():
    W = np.zeros((3, 3))
    W[0, 1] = W[1, 2] = 1.0
    e = edge_emphasis(W)
    assert e.what is None and e.label(0, 1) is None


@pytest.mark.parametrize("bad, what", [
    ("alcohol,malic,0.8,1.3,0.9\n", "not a share"),
    ("alcohol,malic,0.8,x,0.9\n", "not a number"),
    ("alcohol,zz,0.8,0.5,0.9\n", "'zz'"),
    ("", "no strength for the edge"),
])
def test_bad_strength_is_one_line_exit_3_and_writes_nothing(tmp_path, bad, what):
    rows = STRENGTH_CSV.splitlines(keepends=True)
    text = rows[0] + bad + "".join(rows[2:])
    folder = _write_run(tmp_path / "run", edges_csv=text)
    line = _one_line_error(run("show", folder), 3)
    assert "edges.csv" in line and what in line
    assert not any(p.suffix in (".svg", ".png", ".html") for p in folder.iterdir())


def test_a_learned_standardised_run_is_labelled_in_standard_deviations(tmp_path):
    out = tmp_path / "run"
    res = run("learn", TINY / "shards", "--out", out, "--standardize", "--seed", 1, "-q")
    assert res.exit_code == 0, res.output
    assert run("show", out, "--format", "svg", "--graph", "-q").exit_code == 0
    g = read_graph(out / "adjacency.csv")
    rep = json.loads((out / "report.json").read_text())
    sd = dict(zip(rep["data"]["nodes"], rep["standardize"]["sd"]))
    labels = _labels(_svg(out / "graph.svg"))
    assert labels and labels == {
        (int(i), int(j)): short_number(g.W[i, j] * sd[g.names[i]] / sd[g.names[j]]) for i, j in zip(*np.nonzero(g.W))
    }


def test_graph_dot_says_the_same_when_given_strength_or_spreads():
    from bnsl_cli.io.dot import dot_text

    W = np.zeros((4, 4))
    for s, t, w in EDGES:
        W[_k(s, t)] = w
    plain = dot_text(W, NAMES)
    assert 'label="256"' in plain and 'label="0.000453"' in plain  # unchanged without them
    std = dot_text(W, NAMES, sd=[SD[n] for n in NAMES])
    assert f'label="{short_number(256 * SD["alcohol"] / SD["proline"])}"' in std and "weight=256" in std
    S = np.zeros((4, 4))
    S[W != 0] = [0.5, 0.25, 1.0, 0.75]
    boot = dot_text(W, NAMES, strength=S)
    assert {'label="0.50"', 'label="0.25"', 'label="1.00"', 'label="0.75"'} <= set(re.findall(r'label="[^"]*"', boot))
    assert read_graph_text_weights(boot) == {(s, t): w for s, t, w in EDGES}


def read_graph_text_weights(text):
    from bnsl_cli.io.dot import parse_dot_flat

    return {(s, t): float(a["weight"]) for s, t, a in parse_dot_flat(text)[2]}


def test_spreads_are_matched_by_name_and_per_participant(tmp_path):
    from bnsl_cli.io.showrun import load_run

    folder = _write_run(tmp_path / "run")
    assert np.allclose(load_run(folder).sd, [SD[n] for n in NAMES])  # the report lists them in another order
    rep = json.loads((folder / "report.json").read_text())
    g = rep.pop("graph")
    rep.update(method="local-notears", graph=None, local=[{"participant": 1, "graph": g}, {"participant": 2, "graph": g}])
    rep["standardize"] = {"applied": True, "sd": [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]}
    (folder / "report.json").write_text(json.dumps(rep))
    assert np.allclose(load_run(folder, participant=2).sd, [8.0, 7.0, 6.0, 5.0])  # data.nodes is reversed
    rep["standardize"]["sd"] = [1.0, -2.0, 3.0, 4.0]  # not spreads: drawn as raw weights
    (folder / "report.json").write_text(json.dumps(rep))
    assert load_run(folder, participant=1).sd is None
