"""Pictures of a learned graph and of a run (SVG, PNG), drawn with matplotlib.

matplotlib is the optional extra ``bnsl-cli[plots]``; it is imported when a picture is drawn, never
when this module is imported. The layout is ours (:mod:`bnsl_cli.io.layout`): nodes in layers by the
longest path from a source, so every edge points down, ordered within layers to reduce crossings.
Where everything goes (:func:`graph_geometry`) is computed with numpy alone, so that the drawing's
bounds, crossings and label collisions can be measured without drawing
(``benchmarks/show_readability.py``).

Two views:

- **node-link** (:func:`graph_figure`): one box per node with its name, one arrow per edge. Without a
  truth the arrow's colour is the sign (blue positive, red negative); with a truth it is its status
  and the label's colour the sign:

  - ``true``: the edge is in the truth with this direction (green);
  - ``reversed``: the truth has the opposite direction (purple);
  - ``extra``: the truth has the two nodes not adjacent (orange);
  - ``missing``: a truth edge whose nodes the estimate leaves non-adjacent, dashed grey, drawn in the
    truth's direction.

  These are the classes of :func:`bnsl_cli.metrics.structure_metrics` (``tp``, ``reversed``, the
  false edges and ``missing``). What the width and the label of an arrow say is chosen by
  :func:`edge_emphasis`: the edge's **strength** (share of bootstrap runs with the edge, either way:
  the label, the width and the opacity) when the run has one; else its **standardised weight**
  ``W[i, j]·sd(i)/sd(j)`` (the change of ``j``, in its standard deviations, per standard deviation
  of ``i``) when the column spreads are known; else the weight as it is, its width by the rank of
  ``|weight|`` (raw weights in different units, 256 next to 0.00045, say nothing by their size).
  Labels have 2 significant digits and never an exponent; a 0/1 graph has no labels.
- **matrix** (:func:`matrix_figure`): the ``d × d`` heat map of the same values (row: parent,
  column: child), nodes in the layout's layer order so that a DAG's entries sit above the diagonal;
  truth edges outlined. Used for graphs too large to read as nodes and arrows
  (:func:`prefer_matrix`).

Everything drawn lies inside the canvas: the figure is sized from the bounds of every node box,
every edge's control points (a quadratic B-spline stays in the hull of its control points) and every
label box, and from the width of the title and the legend. In the SVG every arrow is a group with the
id ``edge-STATUS-I-J`` (``STATUS`` one of ``sign+``/``sign-`` without a truth), its label
``label-I-J`` and every node ``node-K`` (``I``, ``J``, ``K``: node indices), so scripts and tests
can find them; the matrix view's heat map is ``matrix`` and its truth outlines ``truth-edges``.

SVG text stays text (searchable, selectable); files are deterministic for the same input (no dates,
fixed SVG ids).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bnsl_cli.errors import BnslError
from bnsl_cli.io.emphasis import Emphasis, edge_emphasis, short_number
from bnsl_cli.io.layout import Layout, layered_layout

__all__ = [
    "MATRIX_ABOVE_EDGES",
    "MATRIX_ABOVE_NODES",
    "NEGATIVE",
    "POSITIVE",
    "STATUS_COLOURS",
    "EdgeGeometry",
    "Emphasis",
    "Geometry",
    "edge_emphasis",
    "edge_status",
    "figure_bytes",
    "graph_figure",
    "graph_geometry",
    "line_chart",
    "matrix_figure",
    "matrix_order",
    "need_matplotlib",
    "prefer_matrix",
    "short_number",
    "stacked_bars",
]

POSITIVE = "#1f5fbf"
NEGATIVE = "#c0392b"
#: an edge into or out of a categorical node: it has one coefficient per level, no single sign
CATEGORICAL_EDGE = "#7f8c8d"
STATUS_COLOURS = {"true": "#2e7d32", "reversed": "#8e44ad", "extra": "#e67e22", "missing": "#7f8c8d"}

_FONT = 9.0  # points
_LABEL_FONT = _FONT - 2
_CHAR_W = 0.62 * _FONT / 72.0  # inches per character (about; DejaVu Sans)
_BOX_H = 0.32
_LAYER_GAP = 1.05
_NODE_GAP = 0.35
_LABEL_H = 0.16  # inches: a label's box (7 pt text and its padding)
_MARGIN = 0.3  # inches of white around the drawing

#: The node-link view is drawn up to this many arrows and nodes; above either, :func:`prefer_matrix`
#: chooses the matrix. Measured by ``benchmarks/show_readability.py`` on random DAGs (E = d, 2d, 4d; 5
#: draws each): at most 30 arrows, at least 4 draws in 5 are readable (at most one crossing per arrow,
#: names at 6 pt or more on a 10-inch page); at 34 arrows 3 in 5 (d = 20, E = 2d); from 36 arrows or
#: 40 nodes on, at most 1 in 5 (d = 40, E = d: 36 arrows, 17 inches wide; d = 10, E = 4d: 39 arrows,
#: 1.2 crossings per arrow).
MATRIX_ABOVE_EDGES = 35
MATRIX_ABOVE_NODES = 35


def need_matplotlib():
    """Import matplotlib (headless), or explain how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise BnslError("pictures need matplotlib: pip install 'bnsl-cli[plots]'") from None
    return matplotlib


def edge_status(E: np.ndarray, T: np.ndarray) -> dict:
    """``{(i, j): status}`` for every estimated edge and every missing truth edge (see module docstring)."""
    E = np.asarray(E) != 0
    T = np.asarray(T) != 0
    out = {}
    for i, j in zip(*np.nonzero(E)):
        i, j = int(i), int(j)
        out[(i, j)] = "true" if T[i, j] else ("reversed" if T[j, i] else "extra")
    for i, j in zip(*np.nonzero(T & ~E & ~E.T)):
        out[(int(i), int(j))] = "missing"
    return out


@dataclass(frozen=True)
class EdgeGeometry:
    """One arrow: ``points`` the polyline whose quadratic B-spline is drawn (ends trimmed to the node
    boxes), ``label``/``label_xy``/``label_w`` its label (None for a missing truth edge or a 0/1
    graph), ``status`` (None without a truth), ``sign`` (+1/-1; 0 for a missing edge), ``level``."""

    i: int
    j: int
    status: str | None
    sign: int
    points: list
    label: str | None
    label_xy: tuple | None
    label_w: float
    level: float


@dataclass(frozen=True)
class Geometry:
    """Where the node-link view puts everything, in inches (y up). ``bounds``: (x0, x1, y0, y1) of
    every node box, edge control point and label box."""

    names: tuple
    xy: np.ndarray
    widths: np.ndarray
    box_h: float
    edges: list
    bounds: tuple
    layout: Layout
    emphasis: Emphasis


def _trim(c, p, hw, hh):
    """The point where the segment from the box centre ``c`` towards ``p`` leaves the box."""
    dx, dy = p[0] - c[0], p[1] - c[1]
    ts = [hw / abs(dx) if dx else np.inf, hh / abs(dy) if dy else np.inf]
    t = min(min(ts), 1.0)
    return (c[0] + t * dx, c[1] + t * dy)


def _smooth_path(MPath, pts):
    """A straight line for two points; through bends, a quadratic B-spline: the bends are control
    points and the curve runs through the midpoints between them, ending on the two ends."""
    if len(pts) == 2:
        return MPath(pts, [MPath.MOVETO, MPath.LINETO])
    verts = [pts[0], ((pts[0][0] + pts[1][0]) / 2, (pts[0][1] + pts[1][1]) / 2)]
    codes = [MPath.MOVETO, MPath.LINETO]
    for k in range(1, len(pts) - 1):
        nxt = pts[k + 1] if k + 1 == len(pts) - 1 else ((pts[k][0] + pts[k + 1][0]) / 2, (pts[k][1] + pts[k + 1][1]) / 2)
        verts += [pts[k], nxt]
        codes += [MPath.CURVE3, MPath.CURVE3]
    return MPath(verts, codes)


def _label_spot(pts, placed, w=0.42, h=_LABEL_H):
    """A point on the middle segment of the polyline ``pts`` for a label ``w`` wide, the first of a
    few candidates whose box overlaps no label in ``placed`` (``(x, y, w)`` each)."""
    k = (len(pts) - 1) // 2
    (ax_, ay), (bx, by) = pts[k], pts[k + 1]
    best, best_hits = None, None
    for t in (0.5, 0.32, 0.68, 0.2, 0.8):
        x, y = ax_ + t * (bx - ax_), ay + t * (by - ay)
        hits = sum(1 for px, py, pw in placed if abs(px - x) < (w + pw) / 2 and abs(py - y) < h)
        if hits == 0:
            return x, y
        if best_hits is None or hits < best_hits:
            best, best_hits = (x, y), hits
    return best


def _label_width(text: str) -> float:
    return 0.1 + 0.62 * _LABEL_FONT / 72.0 * len(text)


def graph_geometry(W, names: Sequence[str], truth=None, strength=None, sd=None, levels=None) -> Geometry:
    """Where the node-link view of ``W`` (``W[i, j]``: edge ``i → j``) puts its nodes, arrows and
    labels (numpy only; :func:`graph_figure` draws it). ``truth``: a matrix in the same node order;
    ``strength``, ``sd``: see :func:`edge_emphasis`; ``levels``: name -> level count of the categorical
    nodes (a run with categorical columns): such a node's box carries its count, and an edge into or out of
    one has no single weight (sign 0, no weight label)."""
    W = np.asarray(W, dtype=float)
    d = W.shape[0]
    levels = dict(levels or {})
    names = tuple(str(n) for n in names)
    shown = tuple(f"{n} ({levels[n]})" if n in levels else n for n in names)
    E = W != 0
    status = edge_status(E, truth) if truth is not None else None
    emph = edge_emphasis(W, strength=strength, sd=sd)
    A = E.astype(float)
    keep = np.where(E, 2.0 + emph.level, 0.0)  # cycles (rare) are broken at missing, then weak edges
    if status is not None:
        for (i, j), s in status.items():
            if s == "missing":
                A[i, j] = 1.0
                keep[i, j] = 1.0
    widths = np.array([0.22 + _CHAR_W * max(len(n), 1) for n in shown])
    lay = layered_layout(A, widths, layer_gap=_LAYER_GAP, node_gap=_NODE_GAP, strength=keep)
    xy = lay.xy
    hh = _BOX_H / 2
    xs: list = []
    ys: list = []
    if d:
        xs += [float((xy[:, 0] - widths / 2).min()), float((xy[:, 0] + widths / 2).max())]
        ys += [float(xy[:, 1].min()) - hh, float(xy[:, 1].max()) + hh]
    edges: list = []
    placed: list = []  # labels so far: later ones move along their edge to stay clear
    for (i, j) in sorted(set(zip(*(a.tolist() for a in np.nonzero(E)))) | set(status or ())):
        st = status.get((i, j)) if status is not None else None
        pts = [tuple(xy[i])] + list(lay.bends.get((i, j), ())) + [tuple(xy[j])]
        if (i, j) not in lay.bends and (j, i) in lay.bends and len(pts) == 2:
            pts = [tuple(xy[i])] + list(reversed(lay.bends[(j, i)])) + [tuple(xy[j])]
        pts[0] = _trim(pts[0], pts[1], widths[i] / 2 + 0.02, hh + 0.02)
        pts[-1] = _trim(pts[-1], pts[-2], widths[j] / 2 + 0.04, hh + 0.04)
        pts = [(float(x), float(y)) for x, y in pts]
        xs += [p[0] for p in pts]
        ys += [p[1] for p in pts]
        categorical = names[i] in levels or names[j] in levels
        label = emph.label(i, j) if E[i, j] and not (categorical and emph.what != "strength") else None
        spot, lw = None, 0.0
        if label is not None:
            lw = _label_width(label)
            spot = _label_spot(pts, placed, w=lw)
            placed.append((spot[0], spot[1], lw))
            xs += [spot[0] - lw / 2, spot[0] + lw / 2]
            ys += [spot[1] - _LABEL_H / 2, spot[1] + _LABEL_H / 2]
        sign = 0 if not E[i, j] or categorical else (1 if W[i, j] > 0 else -1)
        edges.append(EdgeGeometry(i, j, st, sign, pts, label, spot, lw, float(emph.level[i, j]) if E[i, j] else 0.0))
    bounds = (min(xs), max(xs), min(ys), max(ys)) if xs else (-1.0, 1.0, -0.5, 0.5)
    return Geometry(shown, xy, widths, _BOX_H, edges, bounds, lay, emph)


def _text_width(text: str, points: float) -> float:
    return 0.62 * points / 72.0 * len(text)


def graph_figure(W, names: Sequence[str], truth=None, title: str | None = None, strength=None, sd=None,
                 levels=None):
    """A matplotlib Figure of the weighted graph ``W`` (``W[i, j]``: edge ``i → j``), optionally
    marked against the truth matrix ``truth`` (same node order); ``strength``/``sd`` choose what
    the arrows' widths and labels say (:func:`edge_emphasis`); ``levels``: the categorical nodes'
    level counts (:func:`graph_geometry`): their boxes are square-cornered and tinted, and their edges grey."""
    need_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path as MPath

    geo = graph_geometry(W, names, truth=truth, strength=strength, sd=sd, levels=levels)
    levels = dict(levels or {})
    categorical_edges = any(e.sign == 0 and e.status != "missing" for e in geo.edges)
    emph = geo.emphasis
    with_truth = truth is not None
    x0, x1, y0, y1 = geo.bounds
    note = emph.note
    if with_truth:
        counts = {s: sum(1 for e in geo.edges if e.status == s) for s in STATUS_COLOURS}
        entries = [f"{s} ({counts[s]})" for s in STATUS_COLOURS]
    else:
        entries = ["positive weight", "negative weight"] + (["categorical: a weight per level"] if categorical_edges else [])
    legend_w = sum(0.6 + _text_width(t, _FONT - 1) for t in entries) + 0.4
    need_w = max(legend_w, _text_width(title or "", _FONT + 2) * 1.1 + 0.2, _text_width(note, _FONT - 2) + 0.2)
    top = 0.55 + (0.35 if title else 0.0) + (0.22 if note else 0.0)
    fig_w = max(x1 - x0 + 2 * _MARGIN, need_w, 4.0)
    fig_h = y1 - y0 + _MARGIN + top
    fig = Figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0, 0, 1, 1))
    cx = (x0 + x1) / 2
    ax.set_xlim(cx - fig_w / 2, cx + fig_w / 2)
    ybot = y0 - _MARGIN
    ax.set_ylim(ybot, y1 + top)
    ax.set_axis_off()

    hh = geo.box_h / 2
    strength_alpha = emph.what == "strength"
    for e in geo.edges:
        sign_colour = POSITIVE if e.sign > 0 else NEGATIVE if e.sign < 0 else CATEGORICAL_EDGE
        colour = STATUS_COLOURS[e.status] if e.status is not None else sign_colour
        missing = e.status == "missing"
        lw = 1.0 if missing else 0.7 + 2.3 * e.level
        alpha = 0.25 + 0.75 * e.level if (strength_alpha and not missing) else 1.0
        arrow = FancyArrowPatch(
            path=_smooth_path(MPath, e.points), arrowstyle="-|>", mutation_scale=11, linewidth=lw, color=colour,
            alpha=alpha, linestyle="--" if missing else "-", zorder=1, joinstyle="round", capstyle="round",
        )
        arrow.set_gid(f"edge-{e.status if e.status is not None else ('sign+' if e.sign > 0 else 'sign-' if e.sign < 0 else 'categorical')}-{e.i}-{e.j}")
        ax.add_patch(arrow)
        if e.label is not None:
            text = ax.text(e.label_xy[0], e.label_xy[1], e.label, fontsize=_LABEL_FONT, color=sign_colour,
                           ha="center", va="center", zorder=3,
                           bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none", "alpha": 0.85})
            text.set_gid(f"label-{e.i}-{e.j}")
    for k, name in enumerate(geo.names):
        categorical = str(names[k]) in levels
        box = FancyBboxPatch(
            (geo.xy[k, 0] - geo.widths[k] / 2, geo.xy[k, 1] - hh), geo.widths[k], geo.box_h,
            boxstyle="square,pad=0" if categorical else "round,pad=0,rounding_size=0.1",
            fc="#fdf2e9" if categorical else "#f4f6f8", ec="#34495e", lw=1.0, zorder=4,
        )
        box.set_gid(f"node-{k}")
        ax.add_patch(box)
        ax.text(geo.xy[k, 0], geo.xy[k, 1], name, fontsize=_FONT, ha="center", va="center", zorder=5)
    ytop = y1 + top - 0.2
    if title:
        ax.text(cx, ytop, title, fontsize=_FONT + 2, ha="center", va="top", weight="bold")
        ytop -= 0.35
    if with_truth:
        handles = [
            Line2D([], [], color=c, lw=2, linestyle="--" if s == "missing" else "-", label=t)
            for (s, c), t in zip(STATUS_COLOURS.items(), entries)
        ]
    else:
        handles = [Line2D([], [], color=POSITIVE, lw=2, label=entries[0]),
                   Line2D([], [], color=NEGATIVE, lw=2, label=entries[1])]
        if categorical_edges:
            handles.append(Line2D([], [], color=CATEGORICAL_EDGE, lw=2, label=entries[2]))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, (ytop - ybot) / (y1 + top - ybot)),
              ncol=len(handles), frameon=False, fontsize=_FONT - 1, handlelength=2.2)
    if note:
        ax.text(cx, ytop - 0.3, note, fontsize=_FONT - 2, ha="center", va="top", color="#555555")
    return fig


def matrix_order(W, truth=None) -> np.ndarray:
    """The nodes in layer order (a source first; within a layer by index): the order of the matrix
    view, in which every edge of a DAG sits above the diagonal."""
    A = (np.asarray(W) != 0).astype(float)
    d = A.shape[0]
    if d == 0:
        return np.arange(0)
    lay = layered_layout(A, sweeps=0)
    return np.array(sorted(range(d), key=lambda k: (int(lay.layer[k]), k)), dtype=int)


def matrix_figure(W, names: Sequence[str], truth=None, title: str | None = None, strength=None, sd=None):
    """The matrix (heat map) view of ``W``: cell (row ``i``, column ``j``) is the edge ``i → j``,
    coloured by its strength (a run with strength; white 0 to dark 1), else by its standardised or
    raw weight (blue +, red −; see :func:`edge_emphasis`). ``truth`` (same node order): its edges
    are outlined in black. Rows and columns in :func:`matrix_order`."""
    need_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path as MPath

    W = np.asarray(W, dtype=float)
    d = W.shape[0]
    names = [str(n) for n in names]
    emph = edge_emphasis(W, strength=strength, sd=sd)
    order = matrix_order(W)
    ix = np.ix_(order, order)
    E = (W != 0)[ix]
    if emph.what == "strength":
        M, cmap, lo, hi, bar = emph.value[ix], "Blues", 0.0, 1.0, "strength (share of bootstrap runs)"
    elif emph.what == "weight":  # raw units: colour by the signed rank of |weight|
        M, cmap, lo, hi, bar = (np.sign(W) * emph.level)[ix], "RdBu", -1.0, 1.0, "weight: sign × rank of |weight|"
    else:
        V = emph.value[ix]
        top = float(np.abs(V).max()) if E.any() else 1.0
        M, cmap, lo, hi = V, "RdBu", -top, top
        bar = "standardised weight W[i, j]·sd(i)/sd(j)" if emph.what else "edge (+1 / −1)"
    M = np.where(E, M, np.nan)
    name_w = max((len(n) for n in names), default=1)
    cell = float(np.clip(7.5 / max(d, 1), 0.06, 0.3))
    cell = max(cell, 2.3 / max(d, 1))  # room for the axis titles under a small matrix
    tick_pt = float(np.clip(cell * 72 * 0.72, 2.5, 8.0))
    side = cell * max(d, 1)
    lab = 0.15 + 0.62 * tick_pt / 72.0 * name_w
    left, top_m, right, bottom = lab + 0.45, lab + 0.45 + (0.4 if title else 0.0), 1.3, 0.35
    fig_w, fig_h = left + side + right, top_m + side + bottom
    fig = Figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((left / fig_w, bottom / fig_h, side / fig_w, side / fig_h))
    import matplotlib as mpl
    from matplotlib.colors import ListedColormap

    # the colour map without its palest part: the weakest edge stays visible against the white of no edge
    base = mpl.colormaps[cmap]
    if cmap == "RdBu":
        stops = np.r_[np.linspace(0.0, 0.38, 128), np.linspace(0.62, 1.0, 128)]
    else:
        stops = np.linspace(0.22, 1.0, 256)
    cm = ListedColormap(base(stops), name=f"bnsl-{cmap}").with_extremes(bad="white")
    im = ax.imshow(M, cmap=cm, vmin=lo, vmax=hi, interpolation="nearest", aspect="equal",
                   extent=(-0.5, d - 0.5, d - 0.5, -0.5))
    im.set_gid("matrix")
    ticks = np.arange(d)
    ax.set_xticks(ticks, [names[k] for k in order], rotation=90, fontsize=tick_pt)
    ax.set_yticks(ticks, [names[k] for k in order], fontsize=tick_pt)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.tick_params(length=0, pad=2)
    ax.set_xlabel("child (edge into this column)", fontsize=8)
    ax.set_ylabel("parent (edge out of this row)", fontsize=8)
    ax.set_xticks(np.arange(-0.5, d, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, d, 1.0), minor=True)
    ax.tick_params(which="minor", length=0)
    if d <= 60:
        ax.grid(which="minor", color="#e3e6ea", lw=0.5)
    ax.plot([-0.5, d - 0.5], [-0.5, d - 0.5], color="#bbbbbb", lw=0.6, zorder=2)
    if truth is not None:
        T = (np.asarray(truth) != 0)[ix]
        verts, codes = [], []
        h = 0.42
        for r, c in zip(*np.nonzero(T)):
            verts += [(c - h, r - h), (c + h, r - h), (c + h, r + h), (c - h, r + h), (c - h, r - h)]
            codes += [MPath.MOVETO, MPath.LINETO, MPath.LINETO, MPath.LINETO, MPath.CLOSEPOLY]
        if verts:
            patch = PathPatch(MPath(verts, codes), fc="none", ec="black", lw=max(0.4, min(1.2, cell * 5)), zorder=3)
            patch.set_gid("truth-edges")
            ax.add_patch(patch)
    cax = fig.add_axes(((left + side + 0.25) / fig_w, bottom / fig_h, 0.15 / fig_w, min(side, 3.0) / fig_h))
    cb = fig.colorbar(im, cax=cax)
    cb.ax.tick_params(labelsize=7)
    cb.set_label(bar + ("; □ truth edge" if truth is not None else ""), fontsize=7)
    if title:
        fig.text(0.5, 1 - 0.12 / fig_h, title, fontsize=_FONT + 2, ha="center", va="top", weight="bold")
    fig._bnsl_tight = True  # tick labels' extents are known only when drawn: figure_bytes crops to them
    return fig


def prefer_matrix(W, truth=None) -> bool:
    """Whether the node-link view of ``W`` is too large to read (more than :data:`MATRIX_ABOVE_EDGES`
    arrows, counting missing truth edges, or more than :data:`MATRIX_ABOVE_NODES` nodes)."""
    E = np.asarray(W) != 0
    n = int(E.sum())
    if truth is not None:
        T = np.asarray(truth) != 0
        n += int((T & ~E & ~E.T).sum())
    return n > MATRIX_ABOVE_EDGES or E.shape[0] > MATRIX_ABOVE_NODES


def figure_bytes(fig, fmt: str, max_pixels: int = 8000) -> bytes:
    """The figure as ``svg`` or ``png`` bytes; deterministic (no date, fixed SVG ids). A PNG's
    resolution is lowered for very large figures so that neither side exceeds ``max_pixels``."""
    import matplotlib

    buf = io.BytesIO()
    tight = {"bbox_inches": "tight", "pad_inches": 0.1} if getattr(fig, "_bnsl_tight", False) else {}
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "bnsl", "font.family": "DejaVu Sans"}):
        if fmt == "svg":
            fig.savefig(buf, format="svg", metadata={"Date": None}, **tight)
        elif fmt == "png":
            w, h = fig.get_size_inches()
            dpi = min(110.0, max_pixels / (max(w, h) + 1.0))
            fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None}, **tight)
        else:  # pragma: no cover - callers pass svg or png
            raise ValueError(fmt)
    return buf.getvalue()


def _chart(width=6.4, height=2.8):
    need_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot(1, 1, 1)


def line_chart(x, series: dict, xlabel: str, ylabel: str, logy: bool = False, title: str | None = None):
    """A line chart of ``{label: values}`` against ``x`` (values may hold None: gaps)."""
    fig, ax = _chart()
    for label, ys in series.items():
        ys = np.array([np.nan if v is None else float(v) for v in ys])
        if logy:
            ys = np.where(ys > 0, ys, np.nan)
        if np.isfinite(ys).any():
            ax.plot(x, ys, marker="." if len(ys) < 60 else None, lw=1.4, label=label)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8, frameon=False)
    return fig


def stacked_bars(labels: Sequence[str], parts: dict, xlabel: str, title: str | None = None):
    """Horizontal bars, one per label, stacked from ``{part name: values per label}``."""
    fig, ax = _chart(height=max(1.6, 0.45 * len(labels) + 1.2))
    left = np.zeros(len(labels))
    y = np.arange(len(labels))
    for name, vals in parts.items():
        vals = np.asarray(vals, dtype=float)
        ax.barh(y, vals, left=left, label=name, height=0.6)
        left += vals
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
