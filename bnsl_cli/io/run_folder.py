"""A learn run's output folder (``bnsl learn --out``, ``bnsl serve --out``, the Flower app's ``out``):
its files' text from a :class:`~bnsl_cli.run.LearnResult`, and report.json as strict JSON. One writer
for every way a run is driven, so their folders are byte for byte the same."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bnsl_cli.dag import is_dag
from bnsl_cli.io.dot import dot_text
from bnsl_cli.io.graph_export import FORMATS, export_texts
from bnsl_cli.io.graphs import adjacency_csv_text, column_kinds_of, cpdag_csv_text, edges_csv_text, strength_csv_text
from bnsl_cli.io.outdir import OutputDir

__all__ = ["LEARN_OWNED", "finite_json", "is_bnsl_output", "json_text", "prepare_run_folder", "run_folder_texts",
           "write_run_folder"]

#: Every file a run's folder may hold (stale ones of an earlier run are removed on commit).
LEARN_OWNED = (
    "adjacency.csv",
    "edges.csv",
    "cpdag.csv",
    "graph.dot",
    "report.json",
    "graph.svg",
    "graph.png",
    "report.html",
    "strength.csv",
    "graph.modelstring",
    "graph.dagitty",
    "participant-*/adjacency.csv",
    "participant-*/edges.csv",
    "participant-*/cpdag.csv",
    "participant-*/graph.dot",
    "participant-*/personal-adjacency.csv",
    "participant-*/graph.modelstring",
    "participant-*/graph.dagitty",
)


def is_bnsl_output(directory: Path) -> bool:
    """Whether ``directory`` holds a bnsl run (a report.json with a ``schema_version``)."""
    rep = directory / "report.json"
    if not rep.is_file():
        return False
    try:
        obj = json.loads(rep.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and "schema_version" in obj


def prepare_run_folder(out, inputs, participants: int, per_participant: bool, force: bool, *,
                       strength: bool = False, option: str = "--out", formats=()):
    """The pre-flight of a run's folder: an :class:`~bnsl_cli.io.outdir.OutputDir` ready to fill
    (``per_participant``: one set of graph files per participant; ``strength``: strength.csv too;
    ``formats``: the graph in those formats too, :mod:`bnsl_cli.io.graph_export`)."""
    names = ["adjacency.csv", "edges.csv", "cpdag.csv", "graph.dot", "report.json"] + (["strength.csv"] if strength else [])
    names += [FORMATS[f] for f in formats]
    if per_participant:
        names += [f"participant-{k + 1:02d}/adjacency.csv" for k in range(participants)]
    return OutputDir(
        out, names=names, owned=LEARN_OWNED, marker="report.json", inputs=inputs, force=force,
        is_ours=is_bnsl_output, option=option,
    ).prepare()


def finite_json(obj):
    """``obj`` with every non-finite float (NaN, ±inf; numpy's too) replaced by ``None``, so that it
    is strict JSON: a report states "no number" as ``null``, never as the non-JSON ``NaN``."""
    import numpy as np

    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite_json(obj.tolist())
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj


def json_text(obj, indent: int = 2) -> str:
    """``obj`` as strict JSON text (non-finite numbers as ``null``: :func:`finite_json`), newline-terminated."""
    return json.dumps(finite_json(obj), indent=indent, allow_nan=False, default=_json_default) + "\n"


def _json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def run_folder_texts(result, method: str, formats=()) -> dict:
    """Every file of a run's folder, ``{relative path: text}``: the graph files (one set per
    participant for local-notears; with ``formats`` the graph in those formats too), strength.csv with
    edge confidence, the personal matrices, and report.json (strict JSON)."""
    texts = {}
    weights = column_kinds_of(result.report) is None  # a categorical node has no single coefficient
    if getattr(result, "local", None) is not None:
        for k, W in enumerate(result.local):
            sub = f"participant-{k + 1:02d}"
            texts[f"{sub}/adjacency.csv"] = adjacency_csv_text(W, result.names)
            texts[f"{sub}/edges.csv"] = edges_csv_text(W, result.names)
            texts[f"{sub}/graph.dot"] = dot_text(W, result.names, f"bnsl {method}, participant {k + 1}")
            if is_dag(W):  # learned graphs are made acyclic; a CPDAG exists only for a DAG
                texts[f"{sub}/cpdag.csv"] = cpdag_csv_text(W, result.names)
            for name, text in export_texts(formats, W, result.names, weights).items():
                texts[f"{sub}/{name}"] = text
    else:
        texts["adjacency.csv"] = adjacency_csv_text(result.W, result.names)
        confidence = getattr(result, "confidence", None)
        texts["edges.csv"] = edges_csv_text(result.W, result.names, confidence, column_kinds_of(result.report))
        if confidence is not None:
            texts["strength.csv"] = strength_csv_text(confidence, result.names)
        cols = result.report.get("columns")
        texts["graph.dot"] = dot_text(result.W, result.names, f"bnsl {result.report.get('method_label', result.report['method'])}",
                                      strength=None if confidence is None else confidence.strength,
                                      levels=None if not cols else {n: len(v) for n, v in cols["levels"].items()})
        if is_dag(result.W):
            texts["cpdag.csv"] = cpdag_csv_text(result.W, result.names)
        texts.update(export_texts(formats, result.W, result.names, weights))
    if getattr(result, "personal", None) is not None:
        for k, B in enumerate(result.personal):
            texts[f"participant-{k + 1:02d}/personal-adjacency.csv"] = adjacency_csv_text(B, result.names)
    texts["report.json"] = json_text(result.report)
    return texts


def write_run_folder(od, result, method: str, formats=()) -> None:
    """Write a run's folder into ``od`` (a prepared :class:`~bnsl_cli.io.outdir.OutputDir`) and commit
    it as one unit."""
    for name, text in run_folder_texts(result, method, formats).items():
        od.write_text(name, text)
    od.commit()
