"""What ``bnsl show`` makes of a ``bnsl learn --out`` folder, or of a graph file: the graph as
SVG/PNG and one self-contained HTML page.

The page (``report.html``) holds, from the folder's ``report.json``: the graph (SVG, inline as a data
URI, with the PNG as a download link), the comparison with a truth (when one is given), the
convergence trace (``history``: h(W), consensus gap, edges per round), the bytes sent per round and
per participant (``communication``), the privacy spend per participant and release (``privacy``,
private runs only), the settings (``options``), the data (participants' files and rows) and the
warnings. Everything is inline: no script, no style sheet, font or image from the network, so the
page reads the same offline and can be mailed as one file. A graph file (any format
:func:`~bnsl_cli.io.graph_formats.read_graph` reads) gets the picture and a page with it alone,
named after the file (``truth.csv`` → ``truth.svg``, ``truth.png``, ``truth.html``).

What the arrows' widths and labels say (:func:`~bnsl_cli.io.draw.edge_emphasis`): the edges'
strength when the run has one (a ``strength`` column in ``edges.csv``, with ``direction``, or a
``strength.csv`` matrix of directed frequencies, as ``bnsl learn --bootstrap`` writes them); else the
standardised weights, from the column spreads of the report's ``standardize.sd``; else the weights.
Large graphs are drawn as a matrix (:func:`~bnsl_cli.io.draw.prefer_matrix`).

The library never writes or prints: :func:`render_run` returns ``{file name: bytes}``.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.draw import (
    figure_bytes,
    graph_figure,
    line_chart,
    matrix_figure,
    prefer_matrix,
    stacked_bars,
)
from bnsl_cli.io.emphasis import edge_emphasis
from bnsl_cli.io.graph_formats import graph_from_json_obj, read_graph, read_text_file
from bnsl_cli.metrics import structure_metrics

__all__ = [
    "FORMATS",
    "OUTPUT_NAMES",
    "VIEWS",
    "Run",
    "choose_view",
    "load_run",
    "output_names",
    "read_edge_strength",
    "render_run",
    "truth_matrix",
]

#: The formats ``bnsl show`` writes and the file each one goes to (for a run folder).
FORMATS = ("svg", "png", "html")
OUTPUT_NAMES = {"svg": "graph.svg", "png": "graph.png", "html": "report.html"}
#: The views of the graph: nodes and arrows, or the d × d matrix (heat map).
VIEWS = ("graph", "matrix")


@dataclass(frozen=True)
class Run:
    """A learn output folder, or a graph file drawn on its own (``source``): its report (empty for a
    graph file) and the learned graph (``W[i, j]``: edge ``i → j``).

    ``strength``: d × d, the share of bootstrap runs holding each drawn edge either way (None: the run
    has none); ``direction``: the share in the drawn direction given the edge; ``sd``: the columns'
    standard deviations in the order of ``names`` (None: unknown)."""

    folder: Path
    report: dict
    W: np.ndarray
    names: tuple
    strength: np.ndarray | None = None
    direction: np.ndarray | None = None
    sd: np.ndarray | None = None
    source: Path | None = None


def output_names(run: Run) -> dict:
    """``{format: file name}``: ``graph.svg``, ``graph.png``, ``report.html`` for a run folder;
    ``STEM.svg``, ``STEM.png``, ``STEM.html`` for a graph file ``STEM.csv`` (so that drawing a
    truth next to a run never overwrites the run's pictures)."""
    if run.source is None:
        return dict(OUTPUT_NAMES)
    stem = run.source.stem if str(run.source) != "-" else "graph"
    return {f: f"{stem}.{f}" for f in FORMATS}


def _is_report(obj) -> bool:
    return isinstance(obj, dict) and "method" in obj and "graph" in obj


def load_run(path, participant: int | None = None) -> Run:
    """Read a run: ``path/report.json`` (or ``path`` itself when it is a learn report), with the edges'
    strength when the folder has one; or a graph file of any format
    :func:`~bnsl_cli.io.graph_formats.read_graph` reads. A local-notears report holds one graph per
    participant: ``participant`` (1-based) chooses one. Every problem is an :class:`InputDataError`
    naming the path."""

    path = Path(path)
    if not path.exists():
        raise InputDataError(f"{path}: not found (expected the folder of a bnsl learn --out run, or a graph file)")
    if path.is_dir():
        rep_path = path / "report.json"
        if not rep_path.is_file():
            raise InputDataError(f"{path}: holds no report.json; expected the folder of a bnsl learn --out run")
        folder = path
    else:
        rep_path, folder = path, path.parent
    text = read_text_file(rep_path, "a report.json")
    if not path.is_dir():
        report = None
        if rep_path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
            try:
                report = json.loads(text)
            except json.JSONDecodeError:
                report = None  # read_graph names the problem
        if not _is_report(report):
            return _graph_file(path)
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputDataError(f"{rep_path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not _is_report(report):
        raise InputDataError(f"{rep_path}: not a bnsl learn report (no 'method' and 'graph')")
    sd = (report.get("standardize") or {}).get("sd") if isinstance(report.get("standardize"), dict) else None
    if report["graph"] is None:
        local = report.get("local")
        if not isinstance(local, list) or not local:
            raise InputDataError(f"{rep_path}: the report holds no graph")
        if participant is None:
            raise InputDataError(
                f"{rep_path}: a local-notears report holds one graph per participant ({len(local)}); "
                "choose one with --participant K"
            )
        entry = next((e for k, e in enumerate(local, start=1)
                      if isinstance(e, dict) and e.get("participant", k) == participant), None)
        if entry is None:
            raise InputDataError(f"{rep_path}: the report has no participant {participant}; choose another --participant")
        g = graph_from_json_obj(rep_path, entry, f" (participant {participant})")
        label = report.get("method_label", report["method"])
        report = {**report, "method_label": f"{label}, participant {participant}"}
        if isinstance(sd, list) and sd and all(isinstance(x, list) for x in sd):  # one list per participant
            sd = sd[participant - 1] if participant <= len(sd) else None
        where = folder / f"participant-{participant:02d}"
    else:
        g = graph_from_json_obj(rep_path, report)
        where = folder
    strength, direction = _run_strength(where, g.W, g.names)
    return Run(folder, report, g.W, g.names, strength, direction, _spreads(report, sd, g.names))


def _graph_file(path: Path) -> Run:
    g = read_graph(path)
    strength = direction = None
    if path.suffix.lower() in (".csv", ".txt", ""):
        strength, direction = read_edge_strength(path, g.W, g.names, required=False)
    return Run(path.parent, {}, g.W, g.names, strength, direction, None, source=path)


def _spreads(report: dict, sd, names) -> np.ndarray | None:
    """The columns' standard deviations in the order of ``names``: the report's ``standardize.sd``,
    matched by name through ``data.nodes`` when the report lists them (None when they do not fit)."""
    if not isinstance(sd, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in sd):
        return None
    nodes = (report.get("data") or {}).get("nodes") if isinstance(report.get("data"), dict) else None
    if isinstance(nodes, list) and len(nodes) == len(sd):
        by = {str(n): float(v) for n, v in zip(nodes, sd)}
        if not all(n in by for n in names):
            return None
        out = np.array([by[n] for n in names])
    elif len(sd) == len(names):
        out = np.asarray(sd, dtype=float)
    else:
        return None
    return out if np.all(np.isfinite(out)) and np.all(out > 0) else None


def _unit_value(cell: str, path: Path, row: int, col: str) -> float:
    try:
        v = float(cell)
    except ValueError:
        raise InputDataError(f"{path}: row {row}, column {col!r}: {cell!r} is not a number") from None
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise InputDataError(f"{path}: row {row}, column {col!r}: {cell!r} is not a share in [0, 1]")
    return v


def read_edge_strength(path: Path, W, names, required: bool = True):
    """``(strength, direction)`` (d × d each, or None) from the ``strength`` and ``direction``
    columns of an edges CSV (``source,target,weight,strength,direction``, as ``bnsl learn
    --bootstrap`` writes it), for the edges of ``W`` over ``names``. ``(None, None)`` when the file
    has no ``strength`` column. With ``required``, every edge of ``W`` must have a row (the file is
    the run's own); edges the file lists that ``W`` lacks are ignored. Problems are an
    :class:`InputDataError` naming the file."""
    text = read_text_file(path, "an edges CSV")
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows:
        return None, None
    header = [c.strip().lower() for c in rows[0]]
    if header[:2] != ["source", "target"] or "strength" not in header:
        return None, None
    ks, kd = header.index("strength"), (header.index("direction") if "direction" in header else None)
    index = {str(n): k for k, n in enumerate(names)}
    d = len(names)
    S = np.full((d, d), np.nan)
    D = np.full((d, d), np.nan) if kd is not None else None
    for r_no, r in enumerate(rows[1:], start=2):
        if len(r) <= max(ks, kd or 0):
            raise InputDataError(f"{path}: row {r_no} has {len(r)} values, expected {len(header)}")
        s, t = r[0].strip(), r[1].strip()
        if s not in index or t not in index:
            raise InputDataError(f"{path}: row {r_no}: edge {s!r} -> {t!r} names a node the graph does not have")
        i, j = index[s], index[t]
        S[i, j] = _unit_value(r[ks].strip(), path, r_no, "strength")
        if D is not None:
            D[i, j] = _unit_value(r[kd].strip(), path, r_no, "direction")
    E = np.asarray(W) != 0
    lacking = [(int(i), int(j)) for i, j in zip(*np.nonzero(E & np.isnan(S)))]
    if lacking and required:
        i, j = lacking[0]
        raise InputDataError(f"{path}: no strength for the edge {names[i]!r} -> {names[j]!r} of the run's graph")
    S = np.where(E, np.nan_to_num(S), 0.0)
    if D is not None:
        D = np.where(E, np.nan_to_num(D, nan=1.0), 0.0)
    return S, D


def _run_strength(folder: Path, W, names):
    """The strength of the run's edges: ``edges.csv``'s ``strength``/``direction`` columns, else
    ``strength.csv`` (directed frequencies ``F[i, j]``: strength ``F[i, j] + F[j, i]``, direction
    ``F[i, j]`` over it); ``(None, None)`` when the run has neither."""
    edges = folder / "edges.csv"
    if edges.is_file():
        S, D = read_edge_strength(edges, W, names)
        if S is not None:
            return S, D
    freq = folder / "strength.csv"
    if not freq.is_file():
        return None, None
    g = read_graph(freq).named(names, source=str(freq), other="the run's graph")
    if set(g.names) != set(names):
        raise InputDataError(f"{freq}: its nodes are not the run's ({len(g.names)} against {len(names)})")
    F = g.reorder(names, source=str(freq)).W
    if np.any(F < 0) or np.any(F > 1):
        raise InputDataError(f"{freq}: holds values outside [0, 1] (expected shares of bootstrap runs)")
    E = np.asarray(W) != 0
    both = np.minimum(F + F.T, 1.0)
    S = np.where(E, both, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        D = np.where(E & (both > 0), F / np.where(both > 0, both, 1.0), 0.0)
    return S, D


def _data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0 or (1e-3 <= abs(v) < 1e6):
            return f"{v:.6g}"
        return f"{v:.3e}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k} = {_fmt(x)}" for k, x in v.items())
    return str(v)


def _table(rows, head=None) -> str:
    e = html.escape
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{e(str(h))}</th>" for h in head) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{e(_fmt(c))}</td>" for c in r) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _flatten(d: dict, prefix: str = "") -> list:
    rows = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            rows.extend(_flatten(v, key + "."))
        else:
            rows.append((key, v))
    return rows


def _img(fig_bytes: bytes, alt: str, mime: str = "image/svg+xml") -> str:
    return f'<img alt="{html.escape(alt)}" src="{_data_uri(mime, fig_bytes)}">'


def _svg(fig) -> bytes:

    return figure_bytes(fig, "svg")


def _convergence(report: dict) -> str | None:

    hist = report.get("history") or []
    hist = [h for h in hist if isinstance(h, dict) and "round" in h]
    if not hist:
        return None
    x = [h["round"] for h in hist]
    series = {k: [h.get(k) for h in hist] for k in ("h", "gap") if any(h.get(k) is not None for h in hist)}
    parts = []
    if series:
        labels = {"h": "h(W) (acyclicity)", "gap": "consensus gap"}
        parts.append(_img(_svg(line_chart(x, {labels[k]: v for k, v in series.items()}, "round", "value", logy=True,
                                          title="Convergence")), "convergence: h(W) and gap per round"))
    if any(h.get("edges") is not None for h in hist):
        parts.append(_img(_svg(line_chart(x, {"edges": [h.get("edges") for h in hist]}, "round", "edges",
                                          title="Edges of the consensus per round")), "edges per round"))
    return "\n".join(parts) or None


def _communication(report: dict) -> str | None:

    comm = report.get("communication") or {}
    if not comm:
        return None
    parts = [_table([(k, comm.get(k)) for k in ("bytes_up", "bytes_down", "bytes_total") if k in comm]
                    + ([("note", comm["note"])] if comm.get("note") else [])
                    + ([("encoding", comm["encoding"])] if comm.get("encoding") else []))]
    per = comm.get("per_participant") or []
    if per:
        parts.append(_table([(p.get("participant"), p.get("bytes_up"), p.get("bytes_down")) for p in per],
                            head=("participant", "bytes up", "bytes down")))
    rounds = comm.get("per_round") or []
    if rounds:
        x = [r.get("round") for r in rounds]
        parts.append(_img(_svg(line_chart(x, {"up (all participants)": [r.get("bytes_up") for r in rounds],
                                              "down (all participants)": [r.get("bytes_down") for r in rounds]},
                                          "round", "bytes", title="Bytes per round")), "bytes per round"))
    return "\n".join(parts)


def _privacy(report: dict) -> str | None:

    pv = report.get("privacy")
    if not pv:
        return None
    parts = [_table([(k, pv.get(k)) for k in ("epsilon", "delta", "neighbouring_relation", "composition", "mechanism")
                     if k in pv])]
    people = pv.get("participants") or []
    if people:
        parts.append(_table([(p.get("participant"), p.get("file"), p.get("rows"), p.get("rho"), p.get("epsilon"))
                             for p in people], head=("participant", "file", "rows", "ρ (zCDP)", "ε")))
        releases: list = []
        for p in people:
            for ev in p.get("events") or []:
                if ev.get("release") not in releases:
                    releases.append(ev.get("release"))
        spend = {r: [sum(float(ev.get("rho") or 0.0) for ev in (p.get("events") or []) if ev.get("release") == r)
                     for p in people] for r in releases}
        labels = [f"participant {p.get('participant')}" for p in people]
        if spend:
            parts.append(_img(_svg(stacked_bars(labels, spend, "ρ spent (zCDP; adds over releases)",
                                                title="Privacy spend per participant, by release")),
                              "privacy spend per participant"))
    return "\n".join(parts)


def _truth_section(W, T, names) -> str:

    m = structure_metrics(W, T, allow_cyclic_truth=True, names=names)
    keys = ("shd", "shd_cpdag", "shd_skeleton", "tp", "reversed", "extra", "missing", "tpr", "fdr", "f1")
    return _table([(k, m[k]) for k in keys])


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:70em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f4f6f8}img{max-width:100%;height:auto;display:block;margin:.6em 0}.warn{color:#a04000}
.muted{color:#666;font-size:.9em}
"""


def _caption(run: Run, view: str, with_truth: bool) -> str:
    """What the picture shows, for the page."""
    what = edge_emphasis(run.W, strength=run.strength, sd=run.sd).what
    if view == "matrix":
        text = ("The matrix view: row i, column j is the edge i → j; nodes in layer order (a source first), so a "
                "DAG's edges sit above the diagonal; ")
        text += {"strength": "the colour is the edge's strength (share of bootstrap runs with the edge).",
                 "standardised weight": "the colour is the standardised weight W[i, j]·sd(i)/sd(j) (blue +, red −).",
                 "weight": "the colour is the sign (blue +, red −), its depth the rank of |weight|.",
                 None: "a coloured cell is an edge."}[what]
        if with_truth:
            text += " Outlined cells are the truth's edges."
        return text
    text = "Layers by the longest path from a source (every edge points down); "
    text += {"strength": "each arrow's label, width and opacity are its strength (share of bootstrap runs with the "
                         "edge, either way); blue positive, red negative weight",
             "standardised weight": "edge labels are the standardised weights W[i, j]·sd(i)/sd(j) of i → j (the "
                                    "change of j, in standard deviations, per standard deviation of i), the width "
                                    "grows with them; blue positive, red negative",
             "weight": "edge labels are the weights W[i, j] of i → j (raw units: the width follows the rank of "
                       "|weight|); blue positive, red negative",
             None: "blue positive, red negative"}[what]
    return text + ("; with the truth, the arrow colour is the edge's status." if with_truth else ".")


def _page(run: Run, graph_svg: bytes, graph_png: bytes | None, truth_html: str | None, truth_name,
          view: str = "graph", png_name: str = "graph.png") -> str:
    e = html.escape
    rep = run.report
    edges = int((run.W != 0).sum())
    if run.source is not None:
        title = f"bnsl show: {run.source.name}"
        head = [("file", str(run.source)), ("nodes", len(run.names)), ("edges", edges)]
    else:
        title = f"bnsl {rep.get('method_label', rep.get('method'))}: {run.folder.name or str(run.folder)}"
        pv = rep.get("privacy") or {}
        head = [("method", rep.get("method_label", rep.get("method"))), ("nodes", len(run.names)), ("edges", edges),
                ("rounds", rep.get("rounds")), ("converged", rep.get("converged")), ("seed", rep.get("seed"))]
        if pv:
            head += [("ε", pv.get("epsilon")), ("δ", pv.get("delta"))]
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        _table(head),
        "<h2>Graph</h2>",
        f'<p class="muted">{e(_caption(run, view, truth_html is not None))}</p>',
        _img(graph_svg, "the graph" if run.source is not None else "the learned graph"),
    ]
    if graph_png is not None:
        out.append(f'<p><a download="{e(png_name)}" href="{_data_uri("image/png", graph_png)}">{e(png_name)}</a></p>')
    if truth_html:
        out += [f"<h2>Against the truth {e(str(truth_name))}</h2>", truth_html]
    if run.source is not None:
        out.append("</body></html>")
        return "\n".join(out) + "\n"
    sections = [("Convergence", _convergence(rep)), ("Communication", _communication(rep)),
                ("Privacy", _privacy(rep))]
    for title_, body in sections:
        if body:
            out += [f"<h2>{title_}</h2>", body]
    if not rep.get("history"):
        out.append('<p class="muted">No per-round trace in this report.</p>')
    out += ["<h2>Settings</h2>", _table(_flatten(rep.get("options") or {}), head=("option", "value"))]
    pol = rep.get("polish")
    if isinstance(pol, dict) and pol:
        out += ["<h2>Polish</h2>", _table([(k, v) for k, v in _flatten(pol)])]
    data = rep.get("data") or {}
    if data:
        out += ["<h2>Data</h2>",
                _table([(p.get("participant"), p.get("file"), p.get("rows")) for p in data.get("participants") or []],
                       head=("participant", "file", "rows"))]
    warns = rep.get("warnings") or []
    if warns:
        out += ["<h2>Warnings</h2>", "<ul>" + "".join(f'<li class="warn">{e(str(w))}</li>' for w in warns) + "</ul>"]
    out.append(f'<p class="muted">Orientation: {e(str(rep.get("orientation", "")))}</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def truth_matrix(run: Run, truth, truth_name=None) -> np.ndarray | None:
    """The truth graph ``truth`` (a :class:`~bnsl_cli.io.graphs.Graph`, or None) as a matrix in the
    run's node order (nodes matched by name; a headerless matrix by position)."""
    if truth is None:
        return None
    where = str(truth_name or "truth")
    truth = truth.named(run.names, source=where, other="the run's graph")  # a headerless matrix
    unknown = [n for n in truth.names if n not in set(run.names)]
    lacking = [n for n in run.names if n not in set(truth.names)]
    if unknown:
        raise InputDataError(f"{where}: node(s) {', '.join(map(repr, unknown[:5]))} are not in the run's graph")
    if lacking and truth.all_nodes_listed:
        raise InputDataError(f"{where}: lacks the run's node(s) {', '.join(map(repr, lacking[:5]))}")
    return truth.reorder(run.names, source=where, allow_missing=True).W


def choose_view(run: Run, view: str | None = None, truth=None, truth_name=None) -> str:
    """``view`` when given (one of :data:`VIEWS`), else ``"matrix"`` for graphs too large to read as
    nodes and arrows (:func:`~bnsl_cli.io.draw.prefer_matrix`), else ``"graph"``."""
    if view is not None:
        if view not in VIEWS:
            raise ValueError(view)
        return view
    return "matrix" if prefer_matrix(run.W, truth_matrix(run, truth, truth_name)) else "graph"


def render_run(run: Run, formats=FORMATS, truth=None, truth_name=None, view: str | None = None) -> dict:
    """``{file name: bytes}`` for the requested ``formats`` (a subset of :data:`FORMATS`; file names
    from :func:`output_names`).

    ``truth``: a :class:`~bnsl_cli.io.graphs.Graph` to mark the edges against (nodes matched by name);
    ``view``: ``"graph"`` (nodes and arrows), ``"matrix"`` (heat map) or None (:func:`choose_view`)."""

    T = truth_matrix(run, truth, truth_name)
    view = choose_view(run, view) if view is not None else ("matrix" if prefer_matrix(run.W, T) else "graph")
    if run.source is not None:
        title = f"bnsl show: {run.source.name}"
    else:
        title = f"bnsl {run.report.get('method_label', run.report.get('method'))}"
    cols = run.report.get("columns") or {}
    levels = {n: len(v) for n, v in (cols.get("levels") or {}).items()}
    if view == "matrix":
        fig = matrix_figure(run.W, run.names, truth=T, title=title, strength=run.strength, sd=run.sd)
    else:  # a categorical node's box says how many levels it has; its edges have no single weight
        fig = graph_figure(run.W, run.names, truth=T, title=title, strength=run.strength, sd=run.sd, levels=levels)
    names = output_names(run)
    out: dict = {}
    svg = figure_bytes(fig, "svg") if ("svg" in formats or "html" in formats) else None
    png = figure_bytes(fig, "png") if ("png" in formats or "html" in formats) else None
    if "svg" in formats:
        out[names["svg"]] = svg
    if "png" in formats:
        out[names["png"]] = png
    if "html" in formats:
        truth_html = _truth_section(run.W, T, list(run.names)) if T is not None else None
        out[names["html"]] = _page(run, svg, png, truth_html, truth_name, view, names["png"]).encode("utf-8")
    return out
