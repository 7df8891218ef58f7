"""Pictures of a learned graph and of a run (SVG, PNG), drawn with matplotlib.

matplotlib is the optional extra ``bnsl-cli[plots]``; it is imported when a picture is drawn, never
when this module is imported. The layout is ours (:mod:`bnsl_cli.io.layout`): nodes in layers by the
longest path from a source, so every edge points down, ordered within layers to reduce crossings.

The graph picture: one box per node with its name; one arrow per edge, its width growing with
|weight| and its label the weight (3 significant digits). Without a truth the arrow's colour is the
sign (blue positive, red negative). With a truth the arrow's colour is its status and the label's
colour the sign:

- ``true``: the edge is in the truth with this direction (green);
- ``reversed``: the truth has the opposite direction (purple);
- ``extra``: the truth has the two nodes not adjacent (orange);
- ``missing``: a truth edge whose nodes the estimate leaves non-adjacent, dashed grey, drawn in the
  truth's direction.

These are the classes of :func:`bnsl_cli.metrics.structure_metrics` (``tp``, ``reversed``, the
false edges and ``missing``). In the SVG every arrow is a group with the id ``edge-STATUS-I-J``
(``STATUS`` one of ``sign+``/``sign-`` without a truth) and every node ``node-K`` (``I``, ``J``, ``K``:
node indices), so scripts and tests can find them.

SVG text stays text (searchable, selectable); files are deterministic for the same input (no dates,
fixed SVG ids).
"""

from __future__ import annotations

import io
from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import BnslError
from bnsl_cli.io.layout import layered_layout

__all__ = ["need_matplotlib", "edge_status", "graph_figure", "figure_bytes", "line_chart",
           "stacked_bars", "POSITIVE", "NEGATIVE", "STATUS_COLOURS"]

POSITIVE = "#1f5fbf"
NEGATIVE = "#c0392b"
STATUS_COLOURS = {"true": "#2e7d32", "reversed": "#8e44ad", "extra": "#e67e22", "missing": "#7f8c8d"}

_FONT = 9.0  # points
_CHAR_W = 0.62 * _FONT / 72.0  # inches per character (about; DejaVu Sans)
_BOX_H = 0.32
_LAYER_GAP = 1.05
_NODE_GAP = 0.35


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


def _label_spot(pts, placed, w=0.42, h=0.16):
    """A point on the middle segment of the polyline ``pts`` for a weight label, the first of a few
    candidates whose label box (``w`` × ``h``) overlaps no label in ``placed``."""
    k = (len(pts) - 1) // 2
    (ax_, ay), (bx, by) = pts[k], pts[k + 1]
    best, best_hits = None, None
    for t in (0.5, 0.32, 0.68, 0.2, 0.8):
        x, y = ax_ + t * (bx - ax_), ay + t * (by - ay)
        hits = sum(1 for px, py in placed if abs(px - x) < w and abs(py - y) < h)
        if hits == 0:
            return x, y
        if best_hits is None or hits < best_hits:
            best, best_hits = (x, y), hits
    return best


def graph_figure(W, names: Sequence[str], truth=None, title: Optional[str] = None):
    """A matplotlib Figure of the weighted graph ``W`` (``W[i, j]``: edge ``i → j``), optionally
    marked against the truth matrix ``truth`` (same node order)."""
    need_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path as MPath

    W = np.asarray(W, dtype=float)
    d = W.shape[0]
    E = W != 0
    status = edge_status(E, truth) if truth is not None else None
    A = E.astype(float)
    strength = np.where(E, 2.0 + np.abs(W), 0.0)  # cycles (rare) are broken at missing, then weak edges
    if status is not None:
        for (i, j), s in status.items():
            if s == "missing":
                A[i, j] = 1.0
                strength[i, j] = 1.0
    widths = np.array([0.22 + _CHAR_W * max(len(str(n)), 1) for n in names])
    lay = layered_layout(A, widths, layer_gap=_LAYER_GAP, node_gap=_NODE_GAP, strength=strength)
    xy = lay.xy
    if d:
        x0, x1 = float((xy[:, 0] - widths / 2).min()), float((xy[:, 0] + widths / 2).max())
        y0, y1 = float(xy[:, 1].min()) - _BOX_H, float(xy[:, 1].max()) + _BOX_H
    else:
        x0, x1, y0, y1 = -1.0, 1.0, -0.5, 0.5
    top = 0.55 + (0.35 if title else 0.0) + (0.3 if status is not None else 0.0)
    fig_w = max(x1 - x0 + 0.6, 6.2 if status is not None else 4.0)
    fig_h = y1 - y0 + 0.3 + top
    fig = Figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0, 0, 1, 1))
    cx = (x0 + x1) / 2
    ax.set_xlim(cx - fig_w / 2, cx + fig_w / 2)
    ax.set_ylim(y0 - 0.3, y1 + top)
    ax.set_axis_off()

    nz = np.abs(W[E])
    scale = float(nz.max()) if nz.size else 1.0
    hh = _BOX_H / 2
    placed: list = []  # weight labels so far: later ones move along their edge to stay clear
    for (i, j) in sorted(set(zip(*map(lambda a: a.tolist(), np.nonzero(E)))) | set(status or ())):
        st = status.get((i, j)) if status is not None else None
        w = float(W[i, j]) if E[i, j] else 0.0
        pts = [tuple(xy[i])] + list(lay.bends.get((i, j), ())) + [tuple(xy[j])]
        if (i, j) not in lay.bends and (j, i) in lay.bends and len(pts) == 2:
            pts = [tuple(xy[i])] + list(reversed(lay.bends[(j, i)])) + [tuple(xy[j])]
        pts[0] = _trim(pts[0], pts[1], widths[i] / 2 + 0.02, hh + 0.02)
        pts[-1] = _trim(pts[-1], pts[-2], widths[j] / 2 + 0.04, hh + 0.04)
        sign_colour = POSITIVE if w > 0 else NEGATIVE
        colour = STATUS_COLOURS[st] if st is not None else sign_colour
        lw = 1.0 if st == "missing" else 0.8 + 2.2 * abs(w) / scale
        path = _smooth_path(MPath, pts)
        arrow = FancyArrowPatch(
            path=path, arrowstyle="-|>", mutation_scale=11, linewidth=lw, color=colour,
            linestyle="--" if st == "missing" else "-", zorder=1, joinstyle="round", capstyle="round",
        )
        arrow.set_gid(f"edge-{st if st is not None else ('sign+' if w > 0 else 'sign-')}-{i}-{j}")
        ax.add_patch(arrow)
        if E[i, j]:
            mx, my = _label_spot(pts, placed)
            placed.append((mx, my))
            ax.text(mx, my, f"{w:.3g}", fontsize=_FONT - 2, color=sign_colour, ha="center", va="center",
                    zorder=3, bbox=dict(boxstyle="round,pad=0.12", fc="white", ec="none", alpha=0.85))
    for k, name in enumerate(names):
        box = FancyBboxPatch(
            (xy[k, 0] - widths[k] / 2, xy[k, 1] - hh), widths[k], _BOX_H,
            boxstyle="round,pad=0,rounding_size=0.1", fc="#f4f6f8", ec="#34495e", lw=1.0, zorder=4,
        )
        box.set_gid(f"node-{k}")
        ax.add_patch(box)
        ax.text(xy[k, 0], xy[k, 1], str(name), fontsize=_FONT, ha="center", va="center", zorder=5)
    ytop = y1 + top - 0.2
    if title:
        ax.text(cx, ytop, title, fontsize=_FONT + 2, ha="center", va="top", weight="bold")
        ytop -= 0.35
    if status is not None:
        counts = {s: sum(1 for v in status.values() if v == s) for s in STATUS_COLOURS}
        handles = [
            Line2D([], [], color=c, lw=2, linestyle="--" if s == "missing" else "-", label=f"{s} ({counts[s]})")
            for s, c in STATUS_COLOURS.items()
        ]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, (ytop - (y0 - 0.3)) / (y1 + top - y0 + 0.3)),
                  ncol=4, frameon=False, fontsize=_FONT - 1, handlelength=2.2)
    else:
        handles = [Line2D([], [], color=POSITIVE, lw=2, label="positive weight"),
                   Line2D([], [], color=NEGATIVE, lw=2, label="negative weight")]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, (ytop - (y0 - 0.3)) / (y1 + top - y0 + 0.3)),
                  ncol=2, frameon=False, fontsize=_FONT - 1)
    return fig


def figure_bytes(fig, fmt: str, max_pixels: int = 8000) -> bytes:
    """The figure as ``svg`` or ``png`` bytes; deterministic (no date, fixed SVG ids). A PNG's
    resolution is lowered for very large figures so that neither side exceeds ``max_pixels``."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "bnsl", "font.family": "DejaVu Sans"}):
        if fmt == "svg":
            fig.savefig(buf, format="svg", metadata={"Date": None})
        elif fmt == "png":
            w, h = fig.get_size_inches()
            dpi = min(110.0, max_pixels / max(w, h))
            fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
        else:  # pragma: no cover - callers pass svg or png
            raise ValueError(fmt)
    return buf.getvalue()


def _chart(width=6.4, height=2.8):
    need_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot(1, 1, 1)


def line_chart(x, series: dict, xlabel: str, ylabel: str, logy: bool = False, title: Optional[str] = None):
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


def stacked_bars(labels: Sequence[str], parts: dict, xlabel: str, title: Optional[str] = None):
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
