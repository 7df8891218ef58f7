"""`bnsl evaluate`: compare estimated graphs with a true graph (SHD, TPR, FDR, FPR, F1, …)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import List, Optional

import typer

from bnsl_cli.cli.common import fail, print_json

#: Columns of the summary table: (metric key, header).
TABLE_COLUMNS = (
    ("nnz", "nnz"),
    ("shd", "SHD"),
    ("shd_cpdag", "SHD cpdag"),
    ("shd_skeleton", "SHD skel"),
    ("tpr", "TPR"),
    ("fdr", "FDR"),
    ("fpr", "FPR"),
    ("f1", "F1"),
    ("tp", "TP"),
    ("reversed", "rev"),
    ("extra", "extra"),
    ("missing", "missing"),
    ("skeleton_f1", "skel F1"),
    ("is_dag", "DAG"),
)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _render_table(rows: list[dict], truth: Path, to_stderr: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"evaluated against {truth}", title_justify="left")
    table.add_column("estimate", overflow="fold")
    for _, head in TABLE_COLUMNS:
        table.add_column(head, justify="right")
    for r in rows:
        table.add_row(Text(str(r["estimate"])), *(_cell(r[k]) for k, _ in TABLE_COLUMNS))
    console = Console(stderr=to_stderr, highlight=False)
    if not console.is_terminal:  # a pipe or a log file: never squeeze or truncate cells
        width = Console(width=100_000).measure(table).maximum
        console = Console(stderr=to_stderr, highlight=False, width=max(width, 40), color_system=None)
    console.print(table)


def _flat_bands(row: dict) -> dict:
    """A CSV row: each strength band's edges and precisions as columns (``edges_0.9-1`` …)."""
    bands = row.get("strength_bands", False)
    if bands is False:
        return row
    out = {k: v for k, v in row.items() if k != "strength_bands"}
    from bnsl_cli.io.strength import STRENGTH_BANDS

    for k, (low, high) in enumerate(STRENGTH_BANDS):
        tag = f"{low:g}-{high:g}"
        b = None if bands is None else bands[k]
        out[f"edges_{tag}"] = None if b is None else b["edges"]
        out[f"precision_{tag}"] = None if b is None else b["precision"]
        out[f"precision_directed_{tag}"] = None if b is None else b["precision_directed"]
    return out


def _render_bands(rows: list[dict], to_stderr: bool) -> None:
    """The precision by strength band of the estimates that have strengths (bnsl learn --bootstrap)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title="precision by edge strength (pair in the truth either way / same direction)",
                  title_justify="left")
    table.add_column("estimate", overflow="fold")
    for low, high in (b for b in _bands()):
        table.add_column(f"strength {low:g}–{high:g}", justify="right")
    for r in rows:
        bands = r.get("strength_bands")
        if not bands:
            continue
        cells = [f"{b['edges']} edges" + ("" if not b["edges"] else f", {b['precision']:.2f} / {b['precision_directed']:.2f}")
                 for b in bands]
        table.add_row(Text(str(r["estimate"])), *cells)
    console = Console(stderr=to_stderr, highlight=False)
    if not console.is_terminal:
        width = Console(width=100_000).measure(table).maximum
        console = Console(stderr=to_stderr, highlight=False, width=max(width, 40), color_system=None)
    console.print(table)


def _bands():
    from bnsl_cli.io.strength import STRENGTH_BANDS

    return STRENGTH_BANDS


def _write_csv(rows: list[dict]) -> None:
    keys = list(rows[0].keys())
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(keys)
    for r in rows:
        writer.writerow(
            ["" if r[k] is None else (str(r[k]).lower() if isinstance(r[k], bool) else r[k]) for k in keys]
        )
    sys.stdout.flush()


def command(
    estimates: List[Path] = typer.Argument(
        ...,
        metavar="ESTIMATE",
        help="Estimated graph file(s): adjacency CSV, edges CSV, 0/1 matrix (with or without header), bnlearn "
        "arc list (from,to), Tetrad graph text, DOT or report JSON (- reads one from standard input).",
        show_default=False,
    ),
    truth: Path = typer.Option(
        ...,
        "--truth",
        "-t",
        metavar="TRUTH",
        help="True graph, in any of the formats above (- for standard input).",
        show_default=False,
    ),
    threshold: float = typer.Option(
        0.0,
        "--threshold",
        min=0.0,
        help="Treat estimated entries with |w| <= T as no edge (0: any non-zero entry is an edge).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Write a JSON list (one object per estimate) to stdout."),
    as_csv: bool = typer.Option(False, "--csv", help="Write CSV (one row per estimate) to stdout."),
    participant: Optional[int] = typer.Option(
        None,
        "--participant",
        metavar="K",
        help="For a local-notears report.json (one graph per participant): evaluate only participant K "
        "(1-based). Without it every participant's graph is evaluated, one row each. Other files ignore it.",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", envvar="BNSL_QUIET", help="With --json/--csv: no summary table on stderr."
    ),
    allow_cyclic_truth: bool = typer.Option(
        False, "--allow-cyclic-truth", help="Evaluate against a truth graph that has cycles (e.g. Sachs' consensus graph)."
    ),
) -> None:
    """Compare estimated graphs with a true graph: SHD, TPR, FDR, FPR, precision, recall, F1, v-structures.

    A CPDAG estimate (undirected edges: symmetric matrix entries, an arc listed both ways, Tetrad's ---) is scored as one: an undirected edge counts once, as a true positive when the truth has the two nodes adjacent; "SHD cpdag" compares it with the truth's CPDAG. A headerless matrix is matched to the other graph by position.

    Besides the DAG SHD: "SHD cpdag" compares the Markov equivalence classes (CPDAGs) of both graphs as R bnlearn's shd does (each node pair counts 1 when absent / i -> j / j -> i / undirected differs; 0 for Markov-equivalent DAGs, empty for a cyclic graph) and "SHD skel" the undirected skeletons. A local-notears report.json gives one row per participant (or --participant K).

    Orientation: W\\[i, j] is the edge i -> j (rows are parents, columns children). An edge is any entry with |w| > --threshold. Nodes are matched by name; nodes an edges CSV does not mention are isolated. Metrics follow NOTEARS' count_accuracy; a rate whose denominator is 0 is null. One row per estimate.

    Output: with --json or --csv the results go to stdout and the summary table to stderr, so a pipe gets clean data; with neither, the table is the result and goes to stdout.

    Exit code 3 for unreadable or mismatched files and for a cyclic truth without --allow-cyclic-truth.
    """
    import numpy as np

    from bnsl_cli.errors import InputDataError
    from bnsl_cli.io.graph_formats import read_graph, read_graphs
    from bnsl_cli.metrics import pdag_undirected, structure_metrics

    if as_json and as_csv:
        raise fail("use either --json or --csv, not both", 2)
    if participant is not None and participant < 1:
        raise fail(f"--participant must be >= 1 (got {participant})", 2)
    if sum(str(p) == "-" for p in [*estimates, truth]) > 1:
        raise fail("'-' (standard input) can be given only once", 2)

    true_graph = read_graph(truth)
    est_graphs = []  # (path, participant or None, graph); every file validated before computing
    for p in estimates:
        graphs = read_graphs(p)
        is_local = graphs[0][0] is not None
        if participant is not None and is_local:
            graphs = [(k, g) for k, g in graphs if k == participant]
            if not graphs:
                raise InputDataError(f"{p}: the report has no participant {participant}; choose another --participant")
        est_graphs.extend((p, k, g) for k, g in graphs)

    # a headerless matrix has no names: it is matched by position to the first graph that has them
    named = next((g for _, _, g in est_graphs if not g.positional), None)
    if true_graph.positional and named is not None:
        true_graph = true_graph.named(named.names, source=str(truth), other="the estimate")
    est_graphs = [(p, k, g.named(true_graph.names, source=str(p), other=f"the truth {truth}"))
                  for p, k, g in est_graphs]

    universe = list(true_graph.names)
    known = set(universe)
    for path, _, g in est_graphs:
        unknown = [n for n in g.names if n not in known]
        if not unknown:
            continue
        if true_graph.all_nodes_listed:
            shown = ", ".join(map(repr, unknown[:5])) + (" …" if len(unknown) > 5 else "")
            raise InputDataError(f"{path}: node(s) {shown} are not in the truth {truth}")
        universe.extend(unknown)  # the truth's format cannot list isolated nodes
        known.update(unknown)
    true_graph = true_graph.reorder(universe, source=str(truth), allow_missing=True)

    from bnsl_cli.io.strength import read_strengths, strength_bands

    T = true_graph.W != 0
    truth_arcs = {(universe[i], universe[j]) for i, j in zip(*np.nonzero(T))}
    truth_pairs = {frozenset(a) for a in truth_arcs}
    rows = []
    for path, k, g in est_graphs:
        W_est = g.reorder(universe, source=str(path), allow_missing=True).W
        if threshold > 0:
            W_est = np.where(np.abs(W_est) <= threshold, 0.0, W_est)
        try:
            m = structure_metrics(
                W_est,
                true_graph.W,
                allow_cyclic_truth=allow_cyclic_truth,
                threshold=threshold,
                names=universe,
                undirected=pdag_undirected(W_est),
            )
        except InputDataError as exc:
            raise InputDataError(f"{truth}: {exc}") from None
        label = str(path) if k is None else f"{path} [participant {k}]"
        row = {"estimate": label, "participant": k, "d": len(universe), **m}
        strengths = read_strengths(path) if k is None else None
        if strengths is not None:  # bnsl learn --bootstrap: precision by strength band
            edges = [(universe[i], universe[j]) for i, j in zip(*np.nonzero(W_est))]
            row["strength_bands"] = strength_bands(edges, strengths, truth_pairs, truth_arcs)
        rows.append(row)
    if any("strength_bands" in r for r in rows):
        for r in rows:
            r.setdefault("strength_bands", None)

    if as_json:
        print_json(rows)
    elif as_csv:
        _write_csv([_flat_bands(r) for r in rows])
    if not (quiet and (as_json or as_csv)):
        _render_table(rows, truth, to_stderr=as_json or as_csv)
        if any(r.get("strength_bands") for r in rows):
            _render_bands(rows, to_stderr=as_json or as_csv)
