"""`bnsl show`: pictures of a learn run (graph.svg, graph.png) and a self-contained report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bnsl_cli.cli import common


def _formats(text: str) -> tuple:
    from bnsl_cli.io.showrun import FORMATS

    wanted = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in wanted if f not in FORMATS]
    if bad or not wanted:
        raise common.fail(f"--format: {', '.join(bad) or 'nothing given'}; choose from {','.join(FORMATS)}", 2)
    return tuple(dict.fromkeys(wanted))


def command(
    run_dir: Path = typer.Argument(
        ..., metavar="RUN_DIR", help="Folder written by bnsl learn --out (or its report.json).", show_default=False
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", metavar="DIR", help="Write the files here (default: RUN_DIR).", show_default=False
    ),
    truth: Optional[Path] = typer.Option(
        None, "--truth", "-t", metavar="FILE",
        help="Mark the edges against this graph (any format evaluate reads): true, extra, reversed, missing.",
        show_default=False,
    ),
    fmt: str = typer.Option("svg,png,html", "--format", "-f", help="Comma-separated: svg, png, html."),
    participant: Optional[int] = typer.Option(
        None, "--participant", metavar="K", min=1,
        help="For a local-notears run (one graph per participant): draw participant K's graph (1-based).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No summary line on stderr."),
) -> None:
    """Draw the learned graph (graph.svg, graph.png) and write report.html: the graph, the convergence
    per round, the bytes sent, the privacy spend per participant (private runs) and the settings.

    The graph is drawn in layers (every edge points down), with the node names, each edge's weight as its
    label and its sign as its colour (blue +, red −). With --truth the arrows are coloured by status: true,
    reversed, extra, and the missing truth edges dashed. report.html is one file with everything inline (no
    network). Needs matplotlib: pip install 'bnsl-cli[plots]'.

    Exit code 3 for a folder that is not a learn run or an unreadable truth.
    """
    from bnsl_cli.io.atomic import atomic_write_bytes
    from bnsl_cli.io.outdir import OutputDirError
    from bnsl_cli.io.showrun import load_run, render_run

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
    files = render_run(run, formats, truth=truth_graph, truth_name=truth)  # everything before any write
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"{target}: cannot create ({exc.strerror or exc}); choose another --out") from None
    for name, data in files.items():
        atomic_write_bytes(target / name, data)
    if not quiet:
        common.err_console.print(f"wrote {', '.join(str(target / n) for n in files)}", highlight=False)
