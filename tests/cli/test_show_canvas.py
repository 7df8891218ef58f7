"""Nothing ``bnsl show`` draws lies outside its canvas (issue 29: an SVG path at x = −117 in a 0–446 view
box, Sachs with the truth drawn over it).

:func:`outside` reads every coordinate an SVG draws — path vertices and control points, text boxes
(measured with the font's metrics), rectangles, images, ellipses, circles, lines, referenced ``<use>``
templates — through every ``transform`` of the element and its ancestors, and lists those outside the
``viewBox``. Clipped elements count too: an arrow clipped at the canvas
edge is an arrow cut off.
"""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tests._cli import run

pytest.importorskip("matplotlib")

from bnsl_cli.io.draw import figure_bytes, graph_figure, matrix_figure

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


def _nums(text):
    return [float(x) for x in re.findall(_NUM, text or "")]


def _transform(text):
    M = np.eye(3)
    for name, args in re.findall(r"(\w+)\s*\(([^)]*)\)", text or ""):
        a = _nums(args)
        if name == "translate":
            T = np.array([[1, 0, a[0]], [0, 1, a[1] if len(a) > 1 else 0], [0, 0, 1]])
        elif name == "scale":
            T = np.diag([a[0], a[1] if len(a) > 1 else a[0], 1.0])
        elif name == "rotate":
            t = np.radians(a[0])
            T = np.array([[np.cos(t), -np.sin(t), 0], [np.sin(t), np.cos(t), 0], [0, 0, 1]])
            if len(a) == 3:
                T = (np.array([[1, 0, a[1]], [0, 1, a[2]], [0, 0, 1]]) @ T
                     @ np.array([[1, 0, -a[1]], [0, 1, -a[2]], [0, 0, 1]]))
        elif name == "matrix":
            T = np.array([[a[0], a[2], a[4]], [a[1], a[3], a[5]], [0, 0, 1]])
        else:
            raise AssertionError(f"unknown SVG transform {name}")
        M = M @ T
    return M


def _path_points(d: str) -> list:
    """Every vertex and control point of a path (absolute and relative commands; no arcs)."""
    assert not re.search(r"[Aa]", re.sub(_NUM, "", d)), "arcs are not handled"
    pts, cur, start = [], (0.0, 0.0), (0.0, 0.0)
    for cmd, args in re.findall(r"([MmLlHhVvCcSsQqTtZz])([^MmLlHhVvCcSsQqTtZz]*)", d):
        a = _nums(args)
        rel, c = cmd.islower(), cmd.upper()
        if c == "Z":
            cur = start
            continue
        if c in "HV":
            for v in a:
                if c == "H":
                    cur = (cur[0] + v if rel else v, cur[1])
                else:
                    cur = (cur[0], cur[1] + v if rel else v)
                pts.append(cur)
            continue
        per = {"M": 2, "L": 2, "T": 2, "Q": 4, "S": 4, "C": 6}[c]
        for k in range(0, len(a), per):
            group = [(a[m], a[m + 1]) for m in range(k, k + per, 2)]
            if rel:
                group = [(x + cur[0], y + cur[1]) for x, y in group]
            pts += group
            cur = group[-1]
            if c == "M" and k == 0:
                start = cur
    return pts


def _text_width(text: str, size: float) -> float:
    """The advance width of ``text`` in DejaVu Sans (the pictures' font) at ``size``, by matplotlib's
    own font metrics."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath

    if not text.strip():
        return 0.0
    return float(TextPath((0, 0), text, size=size, prop=FontProperties(family="DejaVu Sans")).get_extents().x1)


def _style(el) -> dict:
    out = {}
    for part in (el.get("style") or "").split(";"):
        if ":" in part:
            k, v = part.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def drawn_points(svg: bytes) -> list:
    """``(x, y, what)`` of everything the SVG draws, in view-box coordinates."""
    root = ET.fromstring(svg)
    ids = {el.get("id"): el for el in root.iter() if el.get("id")}
    out: list = []

    def emit(M, pts, what):
        if pts:
            P = np.c_[np.asarray(pts, dtype=float), np.ones(len(pts))] @ M.T
            out.extend((float(x), float(y), what) for x, y, _ in P)

    def walk(el, M):
        tag = el.tag.replace(SVG, "")
        if tag in ("defs", "clipPath", "metadata", "style", "title", "desc", "mask", "pattern", "marker", "symbol"):
            return
        M = M @ _transform(el.get("transform"))

        def f(k):
            return float(_nums(el.get(k, "0"))[0]) if el.get(k) else 0.0

        if tag == "path":
            emit(M, _path_points(el.get("d", "")), f"path in {el.get('id') or ''}")
        elif tag in ("rect", "image"):
            x, y, w, h = f("x"), f("y"), f("width"), f("height")
            emit(M, [(x, y), (x + w, y), (x, y + h), (x + w, y + h)], tag)
        elif tag in ("ellipse", "circle"):
            rx, ry = (f("r"), f("r")) if tag == "circle" else (f("rx"), f("ry"))
            emit(M, [(f("cx") - rx, f("cy") - ry), (f("cx") + rx, f("cy") + ry)], tag)
        elif tag == "line":
            emit(M, [(f("x1"), f("y1")), (f("x2"), f("y2"))], tag)
        elif tag in ("polyline", "polygon"):
            v = _nums(el.get("points"))
            emit(M, list(zip(v[::2], v[1::2])), tag)
        elif tag == "use":
            ref = ids.get((el.get(XLINK + "href") or el.get("href") or "").lstrip("#"))
            if ref is not None:
                walk(ref, M @ _transform(f"translate({f('x')} {f('y')})"))
            return
        elif tag == "text":
            st = _style(el)
            size = _nums(st.get("font-size") or el.get("font-size") or "10")[0]
            text = "".join(el.itertext())
            w = _text_width(text, size)
            anchor = st.get("text-anchor") or el.get("text-anchor") or "start"
            x, y = f("x"), f("y")
            x0 = x - w / 2 if anchor == "middle" else (x - w if anchor == "end" else x)
            emit(M, [(x0, y - 0.75 * size), (x0 + w, y - 0.75 * size), (x0, y + 0.2 * size), (x0 + w, y + 0.2 * size)],
                 f"text {text!r}")
            return
        for child in el:
            walk(child, M)

    walk(root, np.eye(3))
    return out


def outside(svg: bytes, tol: float = 1.0) -> list:
    """What the SVG draws outside its view box (``tol``: slack in view-box units, for round joins)."""
    root = ET.fromstring(svg)
    x0, y0, w, h = _nums(root.get("viewBox"))
    return [(x, y, what) for x, y, what in drawn_points(svg)
            if not (x0 - tol <= x <= x0 + w + tol and y0 - tol <= y <= y0 + h + tol)]


# ------------------------------------------------------------------------------------------------
# the check itself can fail
# ------------------------------------------------------------------------------------------------

def test_the_check_finds_what_lies_outside():
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 446 834">'
           b'<g transform="translate(10 0)"><path d="M 20 30 L 40 50 Q -127 411 60 600 z"/></g>'
           b'<text x="440" y="20" style="font-size: 7px; text-anchor: middle">long label here</text>'
           b'<g transform="rotate(-90 100 100)"><text x="100" y="100" style="font-size: 10px">abc</text></g>'
           b'<rect x="5" y="5" width="10" height="900"/></svg>')
    found = outside(svg)
    whats = {w.split(" ")[0] for _, _, w in found}
    assert whats == {"path", "text", "rect"}
    assert any(abs(x - (-117)) < 1e-9 for x, _, w in found if w.startswith("path"))  # the issue's -117
    assert any("long label" in w for _, _, w in found) and not any("abc" in w for _, _, w in found)
    assert _path_points("M 1 2 l 3 4 h 5 v -6 c 1 1 2 2 3 3 Z") == [
        (1, 2), (4, 6), (9, 6), (9, 0), (10, 1), (11, 2), (12, 3)]


def _old_style_bug_svg() -> bytes:
    """An arrow routed through a bend left of every node, as the layout makes for long edges past a
    wide layer; the drawing must widen the canvas to hold it."""
    d = 11
    W = np.zeros((d, d))
    for j in range(1, d):
        W[0, j] = 0.5  # a hub: long edges into every layer
    for j in range(2, d):
        W[j - 1, j] = -1.2
    return figure_bytes(graph_figure(W, [f"n{k}" for k in range(d)], title="t"), "svg")


# ------------------------------------------------------------------------------------------------
# many graphs, both views
# ------------------------------------------------------------------------------------------------

def _dag(d, edges, seed, weights=(0.5, 2.0)):
    from bnsl_cli.simulate import random_dag, random_weights

    rng = np.random.default_rng(seed)
    B = random_dag(d, min(edges, d * (d - 1) / 2), "er", rng=rng)
    return random_weights(B, weights[0], weights[1], rng=rng)


def _learned_like(T, seed, extra=0.15, flip=0.25, drop=0.1):
    """An estimate of the truth ``T``: some edges reversed or dropped, extra edges, mixed weights."""
    rng = np.random.default_rng(seed)
    d = T.shape[0]
    W = np.zeros_like(T)
    for i, j in zip(*np.nonzero(T)):
        r = rng.random()
        if r < drop:
            continue
        if r < drop + flip:
            W[j, i] = rng.normal()
        else:
            W[i, j] = T[i, j]
    add = np.triu(rng.random((d, d)) < extra, 1) & (W == 0) & (W.T == 0)
    W[add] = rng.normal(size=int(add.sum())) * 10.0 ** rng.integers(-5, 3, size=int(add.sum()))
    return W


def _cases():
    rng = np.random.default_rng(0)
    cases = {}
    cases["sparse-chain"] = (np.diag(np.full(7, 0.8), 1), None, {})
    cases["dense-d12"] = (_dag(12, 48, 1), None, {})
    T11 = _dag(11, 17, 2)
    cases["sachs-like-truth"] = (_learned_like(T11, 3, extra=0.35), T11, {})
    cases["sachs-like-truth-strength"] = (_learned_like(T11, 4, extra=0.3), T11, {"strength": rng.random((11, 11))})
    cases["standardised"] = (_dag(9, 14, 5), None, {"sd": 10.0 ** rng.integers(-3, 4, size=9)})
    cases["cycles"] = (np.array([[0, 1.0, 0, 0], [0, 0, 2.0, 0], [-0.5, 0, 0, 3.0], [0, 0.7, 0, 0]]), None, {})
    cases["two-cycle"] = (np.array([[0, 1.0, 0], [0.4, 0, 0], [0, 0, 0.0]]), None, {})
    cases["empty"] = (np.zeros((3, 3)), None, {})
    cases["one-node"] = (np.zeros((1, 1)), None, {})
    long = np.zeros((4, 4))
    long[0, 1] = long[1, 3] = long[0, 3] = 1.0
    cases["long-names"] = (long, np.triu(np.ones((4, 4)), 1), {"names": ["a" * 40, "b", "c" * 25, "d"]})
    cases["large-d60"] = (_dag(60, 120, 6), None, {})
    T40 = _dag(40, 80, 7)
    cases["large-truth-d40"] = (_learned_like(T40, 8, extra=0.03), T40, {})
    cases["hub"] = (None, None, {})  # filled by _old_style_bug_svg
    return cases


CASES = _cases()


@pytest.mark.parametrize("view", ["graph", "matrix"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_picture_stays_inside_its_canvas(case, view):
    W, T, extra = CASES[case]
    if case == "hub":
        if view == "matrix":
            pytest.skip("the hub case is about long edges of the node-link view")
        svg = _old_style_bug_svg()
    else:
        extra = dict(extra)
        names = extra.pop("names", None) or [f"x{k + 1}" for k in range(W.shape[0])]
        draw = graph_figure if view == "graph" else matrix_figure
        svg = figure_bytes(draw(W, names, truth=T, title=f"bnsl case {case}", **extra), "svg")
    found = outside(svg)
    assert not found, f"{len(found)} points outside the view box, e.g. {found[:4]}"
    assert len(drawn_points(svg)) > 4


def test_a_long_title_widens_a_small_picture():
    W = np.zeros((2, 2))
    W[0, 1] = 1.0
    svg = figure_bytes(graph_figure(W, ["a", "b"], title="bnsl local-notears, participant 12 of a long run name"), "svg")
    assert not outside(svg)


# ------------------------------------------------------------------------------------------------
# the case, end to end: an 11-node graph learned from simulated data, the truth drawn over it
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sachs_like(tmp_path_factory):
    base = tmp_path_factory.mktemp("sachs_like")
    res = run("simulate", "--nodes", 11, "--edges", 17, "--participants", 3, "--samples", 300, "--seed", 4,
              "--out", base / "sim")
    assert res.exit_code == 0, res.output
    res = run("learn", base / "sim" / "shards", "--out", base / "run", "--seed", 1, "-q")
    assert res.exit_code == 0, res.output
    return base


@pytest.mark.parametrize("view", ["--graph", "--matrix"])
def test_sachs_like_run_with_its_truth_stays_inside(sachs_like, tmp_path, view):
    out = tmp_path / "pics"
    res = run("show", sachs_like / "run", "--truth", sachs_like / "sim" / "truth.csv", view, "--out", out, "-q")
    assert res.exit_code == 0, res.output
    svg = (out / "graph.svg").read_bytes()
    assert not outside(svg)
    page = (out / "report.html").read_text(encoding="utf-8")
    for uri in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page):  # every chart of the page too
        assert not outside(base64.b64decode(uri))
