"""The matrix (heat-map) view of ``bnsl show``: ``--matrix`` draws the d × d adjacency (or strength);
graphs above the measured size (``benchmarks/show_readability.py``) get it by default, with a note;
``--graph``/``--no-matrix`` force nodes and arrows."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from bnsl_cli.io.graphs import adjacency_csv_text
from tests._cli import run

pytest.importorskip("matplotlib")

from bnsl_cli.io.draw import (
    MATRIX_ABOVE_EDGES,
    MATRIX_ABOVE_NODES,
    matrix_order,
    prefer_matrix,
)


def _ids(svg: bytes) -> set:
    return {el.get("id") for el in ET.fromstring(svg).iter() if el.get("id")}


def _dag(d, edges, seed):
    from bnsl_cli.simulate import random_dag, random_weights

    rng = np.random.default_rng(seed)
    return random_weights(random_dag(d, edges, "er", rng=rng), rng=rng)


def _chain(n_edges, d=None):
    """``n_edges`` edges on ``d`` nodes (default: as few as hold them), the first pairs of the upper triangle."""
    d = d or int(np.ceil((1 + np.sqrt(1 + 8 * n_edges)) / 2))
    W = np.zeros((d, d))
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d)][:n_edges]
    for k, (i, j) in enumerate(pairs):
        W[i, j] = 1.0 + 0.1 * k
    return W


def _write(path, W):
    names = [f"v{k + 1}" for k in range(W.shape[0])]
    path.write_text(adjacency_csv_text(W, names))
    return path


def test_the_threshold_is_on_both_sides_of_the_measured_size():
    assert not prefer_matrix(_chain(MATRIX_ABOVE_EDGES))
    assert prefer_matrix(_chain(MATRIX_ABOVE_EDGES + 1))
    assert not prefer_matrix(np.zeros((MATRIX_ABOVE_NODES, MATRIX_ABOVE_NODES)))
    assert prefer_matrix(np.zeros((MATRIX_ABOVE_NODES + 1, MATRIX_ABOVE_NODES + 1)))
    W = _chain(MATRIX_ABOVE_EDGES - 1, d=MATRIX_ABOVE_NODES)
    T = np.zeros_like(W)
    T[-2, -1] = T[-3, -1] = 1.0  # two missing truth edges are arrows too
    assert not (W[-3:, -3:]).any()
    assert not prefer_matrix(W) and prefer_matrix(W, truth=T)


def test_help_states_the_threshold():
    res = run("show", "--help")
    text = re.sub(r"[│\s]+", " ", res.output)
    assert f"above {MATRIX_ABOVE_EDGES} edges or {MATRIX_ABOVE_NODES} nodes" in text
    assert "--matrix" in text and "--no-matrix" in text and "--graph" in text


def test_matrix_order_puts_a_dags_edges_above_the_diagonal():
    for seed in range(4):
        W = _dag(25, 50, seed)
        order = matrix_order(W)
        assert sorted(order.tolist()) == list(range(25))
        M = W[np.ix_(order, order)]
        assert not np.tril(M).any()


def test_a_large_graph_is_drawn_as_a_matrix_with_a_note(tmp_path):
    W = _dag(40, 80, 1)
    f = _write(tmp_path / "big.csv", W)
    res = run("show", f)
    assert res.exit_code == 0, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("note: 40 nodes,") and "--graph" in lines[0]
    svg = (tmp_path / "big.svg").read_bytes()
    ids = _ids(svg)
    assert "matrix" in ids and not any(i.startswith("edge-") for i in ids)
    assert b"<image" in svg
    assert "matrix view" in (tmp_path / "big.html").read_text(encoding="utf-8")
    for flag in ("--graph", "--no-matrix"):
        res = run("show", f, "--format", "svg", "--out", tmp_path / flag.strip("-"), flag)
        assert res.exit_code == 0, res.output
        assert not res.stderr.startswith("note")
        ids = _ids((tmp_path / flag.strip("-") / "big.svg").read_bytes())
        assert "matrix" not in ids and sum(i.startswith("edge-") for i in ids) == int((W != 0).sum())


def test_a_small_graph_stays_nodes_and_arrows_unless_asked(tmp_path):
    W = _chain(5)
    f = _write(tmp_path / "small.csv", W)
    res = run("show", f, "--format", "svg")
    assert res.exit_code == 0 and not res.stderr.startswith("note")
    assert "matrix" not in _ids((tmp_path / "small.svg").read_bytes())
    res = run("show", f, "--format", "svg,png", "--matrix", "-q")
    assert res.exit_code == 0, res.output
    svg = (tmp_path / "small.svg").read_bytes()
    assert "matrix" in _ids(svg) and (tmp_path / "small.png").read_bytes()[:4] == b"\x89PNG"
    texts = ["".join(el.itertext()) for el in ET.fromstring(svg).iter() if el.tag.endswith("}text")]
    assert {f"v{k + 1}" for k in range(W.shape[0])} <= set(texts)  # row and column names


def test_the_truth_is_outlined_one_square_per_truth_edge(tmp_path):
    W = _dag(12, 20, 3)
    T = (W != 0).astype(float)
    T[np.nonzero(W)[0][0], np.nonzero(W)[1][0]] = 0.0
    T[0, 11] = T[11, 0] = 0.0
    T[0, 11] = 1.0
    f, t = _write(tmp_path / "est.csv", W), _write(tmp_path / "truth.csv", T)
    res = run("show", f, "--truth", t, "--matrix", "--format", "svg", "-q")
    assert res.exit_code == 0, res.output
    root = ET.fromstring((tmp_path / "est.svg").read_bytes())
    group = next(el for el in root.iter() if el.get("id") == "truth-edges")
    d = "".join(p.get("d") for p in group.iter() if p.tag.endswith("}path"))
    assert d.count("M") == int(T.sum())


def test_strength_colours_the_matrix(tmp_path):
    f = tmp_path / "boot.csv"
    f.write_text("source,target,weight,strength,direction\na,b,1.5,0.9,0.8\nb,c,-2,0.3,1\n")
    res = run("show", f, "--matrix", "--format", "svg", "-q")
    assert res.exit_code == 0, res.output
    texts = " ".join("".join(el.itertext()) for el in ET.fromstring((tmp_path / "boot.svg").read_bytes()).iter())
    assert "strength (share of bootstrap runs)" in texts


def test_the_matrix_without_matplotlib_is_the_same_one_line(tmp_path, monkeypatch):
    import sys

    f = _write(tmp_path / "g.csv", _chain(3))
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = run("show", f, "--matrix")
    assert res.exit_code == 1, res.output
    assert res.stderr.strip().splitlines() == ["error: pictures need matplotlib: pip install 'bnsl-cli[plots]'"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.csv"]
