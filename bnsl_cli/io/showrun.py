"""What ``bnsl show`` makes of a ``bnsl learn --out`` folder: the graph as SVG/PNG and one
self-contained HTML page.

The page (``report.html``) holds, from the folder's ``report.json``: the graph (SVG, inline as a data
URI, with the PNG as a download link), the comparison with a truth (when one is given), the
convergence trace (``history``: h(W), consensus gap, edges per round), the bytes sent per round and
per participant (``communication``), the privacy spend per participant and release (``privacy``,
private runs only), the settings (``options``), the data (participants' files and rows) and the
warnings. Everything is inline: no script, no style sheet, font or image from the network, so the
page reads the same offline and can be mailed as one file.

The library never writes or prints: :func:`render_run` returns ``{file name: bytes}``.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.draw import figure_bytes, graph_figure, line_chart, stacked_bars
from bnsl_cli.io.graph_formats import graph_from_json_obj, read_text_file
from bnsl_cli.metrics import structure_metrics

__all__ = ["Run", "load_run", "render_run", "FORMATS", "OUTPUT_NAMES"]

#: The formats ``bnsl show`` writes and the file each one goes to.
FORMATS = ("svg", "png", "html")
OUTPUT_NAMES = {"svg": "graph.svg", "png": "graph.png", "html": "report.html"}


@dataclass(frozen=True)
class Run:
    """A learn output folder: its report and the learned graph (``W[i, j]``: edge ``i → j``)."""

    folder: Path
    report: dict
    W: np.ndarray
    names: tuple


def load_run(path, participant: Optional[int] = None) -> Run:
    """Read ``path/report.json`` (or ``path`` itself when it is a report.json). A local-notears report
    holds one graph per participant: ``participant`` (1-based) chooses one. Every problem is an
    :class:`InputDataError` naming the path."""

    path = Path(path)
    if not path.exists():
        raise InputDataError(f"{path}: not found (expected the folder of a bnsl learn --out run)")
    if path.is_dir():
        rep_path = path / "report.json"
        if not rep_path.is_file():
            raise InputDataError(f"{path}: holds no report.json; expected the folder of a bnsl learn --out run")
        folder = path
    else:
        rep_path, folder = path, path.parent
    text = read_text_file(rep_path, "a report.json")
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputDataError(f"{rep_path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(report, dict) or "method" not in report or "graph" not in report:
        raise InputDataError(f"{rep_path}: not a bnsl learn report (no 'method' and 'graph')")
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
        report = {**report, "method": f"{report['method']}, participant {participant}"}
        return Run(folder, report, g.W, g.names)
    g = graph_from_json_obj(rep_path, report)
    return Run(folder, report, g.W, g.names)


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


def _convergence(report: dict) -> Optional[str]:

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


def _communication(report: dict) -> Optional[str]:

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


def _privacy(report: dict) -> Optional[str]:

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


def _page(run: Run, graph_svg: bytes, graph_png: Optional[bytes], truth_html: Optional[str], truth_name) -> str:
    e = html.escape
    rep = run.report
    edges = int((run.W != 0).sum())
    pv = rep.get("privacy") or {}
    head = [("method", rep.get("method")), ("nodes", len(run.names)), ("edges", edges),
            ("rounds", rep.get("rounds")), ("converged", rep.get("converged")), ("seed", rep.get("seed"))]
    if pv:
        head += [("ε", pv.get("epsilon")), ("δ", pv.get("delta"))]
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>bnsl — {e(str(rep.get('method')))} — {e(run.folder.name or str(run.folder))}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>bnsl {e(str(rep.get('method')))}: {e(run.folder.name or str(run.folder))}</h1>",
        _table(head),
        "<h2>Graph</h2>",
        '<p class="muted">Layers by the longest path from a source (every edge points down); edge labels are the '
        "weights W[i, j] of i → j; blue positive, red negative"
        + ("; with the truth, the arrow colour is the edge's status." if truth_html else ".") + "</p>",
        _img(graph_svg, "the learned graph"),
    ]
    if graph_png is not None:
        out.append(f'<p><a download="graph.png" href="{_data_uri("image/png", graph_png)}">graph.png</a></p>')
    if truth_html:
        out += [f"<h2>Against the truth {e(str(truth_name))}</h2>", truth_html]
    sections = [("Convergence", _convergence(rep)), ("Communication", _communication(rep)),
                ("Privacy", _privacy(rep))]
    for title, body in sections:
        if body:
            out += [f"<h2>{title}</h2>", body]
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


def render_run(run: Run, formats=FORMATS, truth=None, truth_name=None) -> dict:
    """``{file name: bytes}`` for the requested ``formats`` (a subset of :data:`FORMATS`).

    ``truth``: a :class:`~bnsl_cli.io.graphs.Graph` to mark the edges against (nodes matched by name)."""

    T = None
    if truth is not None:
        where = str(truth_name or "truth")
        truth = truth.named(run.names, source=where, other="the run's graph")  # a headerless matrix
        unknown = [n for n in truth.names if n not in set(run.names)]
        lacking = [n for n in run.names if n not in set(truth.names)]
        if unknown:
            raise InputDataError(f"{where}: node(s) {', '.join(map(repr, unknown[:5]))} are not in the run's graph")
        if lacking and truth.all_nodes_listed:
            raise InputDataError(f"{where}: lacks the run's node(s) {', '.join(map(repr, lacking[:5]))}")
        T = truth.reorder(run.names, source=where, allow_missing=True).W
    title = f"bnsl {run.report.get('method')}"
    fig = graph_figure(run.W, run.names, truth=T, title=title)
    out: dict = {}
    svg = figure_bytes(fig, "svg") if ("svg" in formats or "html" in formats) else None
    png = figure_bytes(fig, "png") if ("png" in formats or "html" in formats) else None
    if "svg" in formats:
        out[OUTPUT_NAMES["svg"]] = svg
    if "png" in formats:
        out[OUTPUT_NAMES["png"]] = png
    if "html" in formats:
        truth_html = _truth_section(run.W, T, list(run.names)) if T is not None else None
        out[OUTPUT_NAMES["html"]] = _page(run, svg, png, truth_html, truth_name).encode("utf-8")
    return out
