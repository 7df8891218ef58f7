"""`bnsl show`: pictures of a learn run (graph.svg, graph.png) and a self-contained report.html, or
of a graph file (FILE.svg, FILE.png, FILE.html)."""

from __future__ import annotations

from pathlib import Path

import typer

from bnsl_cli.cli import common
from bnsl_cli.io.draw import MATRIX_ABOVE_EDGES as _MATRIX_EDGES
from bnsl_cli.io.draw import MATRIX_ABOVE_NODES as _MATRIX_NODES


def _formats(text: str) -> tuple:
    from bnsl_cli.io.showrun import FORMATS

    wanted = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in wanted if f not in FORMATS]
    if bad or not wanted:
        raise common.fail(f"--format: {', '.join(bad) or 'nothing given'}; choose from {','.join(FORMATS)}", 2)
    return tuple(dict.fromkeys(wanted))


def command(
    run_dir: Path = typer.Argument(
        ..., metavar="RUN_DIR|FILE",
        help="Folder written by bnsl learn --out (or its report.json), or a graph file (any format evaluate reads).",
        show_default=False,
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", metavar="DIR", help="Write the files here (default: RUN_DIR, or the file's folder).",
        show_default=False,
    ),
    truth: Path | None = typer.Option(
        None, "--truth", "-t", metavar="FILE",
        help="Mark the edges against this graph (any format evaluate reads): true, extra, reversed, missing.",
        show_default=False,
    ),
    fmt: str = typer.Option("svg,png,html", "--format", "-f", help="Comma-separated: svg, png, html."),
    matrix: bool | None = typer.Option(
        None, "--matrix/--graph", " /--no-matrix",
        help="Draw the d × d matrix (heat map), or nodes and arrows. Default: the matrix above "
        f"{_MATRIX_EDGES} edges or {_MATRIX_NODES} nodes.",
        show_default=False,
    ),
    participant: int | None = typer.Option(
        None, "--participant", metavar="K", min=1,
        help="For a local-notears run (one graph per participant): draw participant K's graph (1-based).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No summary line on stderr."),
) -> None:
    """Draw the learned graph (graph.svg, graph.png) and write report.html: the graph, the convergence
    per round, the bytes sent, the privacy spend per participant (private runs) and the settings. Given
    a graph file (truth.csv, edges.csv, graph.dot, ...), draw it: truth.svg, truth.png, truth.html.

    The graph is drawn in layers (every edge points down), with the node names and each edge's sign as
    its colour (blue +, red −). Labels and widths: the edge's strength when the run has one (bnsl learn
    --bootstrap), else its standardised weight W\\[i, j]·sd(i)/sd(j) (the report's column spreads), else
    its weight. With --truth the arrows are coloured by status: true, reversed, extra, and the missing
    truth edges dashed. Large graphs are drawn as a matrix (heat map): --matrix/--graph choose.
    report.html is one file with everything inline (no network). Needs matplotlib: pip install
    'bnsl-cli\\[plots]'.

    Exit code 3 for a folder that is not a learn run, a file that is no graph, or an unreadable truth.
    """
    from bnsl_cli.io.atomic import atomic_write_bytes
    from bnsl_cli.io.outdir import OutputDirError
    from bnsl_cli.io.showrun import choose_view, load_run, render_run

    formats = _formats(fmt)
    run = load_run(run_dir, participant)
    target = Path(out) if out is not None else run.folder
    if target.exists() and not target.is_dir():
        raise OutputDirError(f"{target}: exists and is not a directory; choose another --out")
    truth_graph = None
    if truth is not None:
        from bnsl_cli.io.graph_formats import read_graph

        truth_graph = read_graph(truth)
    from bnsl_cli.io.draw import need_matplotlib

    need_matplotlib()
    view = choose_view(run, None if matrix is None else ("matrix" if matrix else "graph"), truth_graph, truth)
    files = render_run(run, formats, truth=truth_graph, truth_name=truth, view=view)  # everything before any write
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"{target}: cannot create ({exc.strerror or exc}); choose another --out") from None
    for name, data in files.items():
        atomic_write_bytes(target / name, data)
    if not quiet:
        if matrix is None and view == "matrix":
            edges = int((run.W != 0).sum())
            common.err_console.print(
                f"note: {len(run.names)} nodes, {edges} edges: drawn as a matrix (--graph draws nodes and arrows)",
                highlight=False,
            )
        common.err_console.print(f"wrote {', '.join(str(target / n) for n in files)}", highlight=False)
