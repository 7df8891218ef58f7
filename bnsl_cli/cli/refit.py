"""``bnsl refit``: per-participant least-squares weights on a learned structure (personalisation)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import typer

from bnsl_cli.cli import common, dataopts

SUMMARY = "summary.json"
GENERATOR = "bnsl refit"
SCHEMA_VERSION = 1


def _participant_file(k: int) -> str:
    return f"participant-{k + 1:02d}.csv"


def _is_refit_output(out: Path) -> bool:
    try:
        obj = json.loads((out / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and obj.get("generator") == GENERATOR


def _estimate_path(estimate: Path) -> Path:
    """A ``bnsl learn --out`` directory stands for its ``adjacency.csv``."""
    if estimate.is_dir() and (estimate / "adjacency.csv").is_file():
        return estimate / "adjacency.csv"
    return estimate


def _truth_paths(truth_dir: Path, shards: list[Path]) -> list[Path]:
    """Truth of each shard: same file name in ``truth_dir``, else ``participant-NN.csv`` by position."""
    from bnsl_cli.errors import InputDataError

    if not truth_dir.is_dir():
        raise InputDataError(f"{truth_dir}: --truth-dir is not a directory")
    out = []
    for k, shard in enumerate(shards):
        same = truth_dir / shard.name
        by_pos = truth_dir / _participant_file(k)
        if same.is_file():
            out.append(same)
        elif by_pos.is_file():
            out.append(by_pos)
        else:
            raise InputDataError(
                f"{truth_dir}: no truth for shard {shard} (looked for {same.name} and {by_pos.name})"
            )
    return out


def _source_report(est_path: Path) -> dict | None:
    """The run report ESTIMATE comes from (the report itself, or the ``report.json`` beside an
    adjacency/edges file), when there is one."""
    c = est_path if est_path.suffix.lower() == ".json" else est_path.parent / "report.json"
    try:
        rep = json.loads(c.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rep if isinstance(rep, dict) else None


def _private_source(est_path: Path) -> Optional[dict]:
    """The ``privacy`` section of the run report ESTIMATE comes from, when that run was private."""
    rep = _source_report(est_path)
    return rep["privacy"] if rep is not None and isinstance(rep.get("privacy"), dict) else None


def _recorded_read(est_path: Path):
    """The input options the learn run of ESTIMATE read its shards with (its report's ``input``:
    :class:`~bnsl_cli.io.table.ReadOptions`), or ``None`` when it records none (options left at
    their defaults, or no report)."""
    from bnsl_cli.io.table import ReadOptions

    rep = _source_report(est_path)
    entry = None if rep is None else rep.get("input")
    return ReadOptions.from_dict(entry) if isinstance(entry, dict) else None


def _read_options(ctx: typer.Context, est_path: Path, sep: str | None, read: dict):
    """The options the shards are read with: those recorded by the learn run of ESTIMATE (so the
    shards are read as learn read them), each replaced by the one given here; without a record, the
    ones given here. Also the recorded options used, as command-line flags ("" when none)."""
    values = {**read, "sep": sep}
    recorded = _recorded_read(est_path)
    if recorded is None:
        return dataopts.read_options(**values), ""
    given = dataopts.given_options(ctx)
    opts = dataopts.reuse_read_options(recorded, {k: v for k, v in values.items() if k in given})
    return opts, dataopts.recorded_flags(replace(recorded, **{k: getattr(type(recorded)(), k) for k in given}))


def epsilon_text(eps) -> str:
    """ε as a person reads it: 4.999999999994976 → 5.00 (two decimals; two significant digits below 0.1)."""
    try:
        e = float(eps)
    except (TypeError, ValueError):
        return str(eps)
    return f"{e:.2f}" if e >= 0.1 else f"{e:.2g}"


def _render(rows: list[dict]) -> None:
    from rich.table import Table

    table = Table(title="refit (each participant on its own rows)", title_justify="left")
    for head in ("participant", "file", "rows", "edges", "MSE"):
        table.add_column(head, justify="left" if head == "file" else "right", overflow="fold")
    for r in rows:
        mse = "-" if r["mse"] is None else f"{r['mse']:.4f}"
        table.add_row(str(r["participant"]), r["file"], str(r["rows"]), str(r["edges"]), mse)
    common.err_console.print(table)


@dataopts.with_read_options(after="sep", panel=None)
def command(
    ctx: typer.Context,
    estimate: Path = typer.Argument(
        ...,
        metavar="ESTIMATE",
        help="The learned structure: adjacency CSV, edges CSV, 0/1 matrix, DOT or report JSON "
        "(or a `bnsl learn --out` directory). Its non-zeros fix each node's parents.",
        show_default=False,
    ),
    shards: List[str] = typer.Argument(
        None, metavar="SHARDS", help="Participant CSV files, directories of *.csv, or quoted globs."
    ),
    files_from: Optional[Path] = dataopts.files_from_option(None),
    sep: Optional[str] = dataopts.sep_option(None),
    out: Path = typer.Option(..., "--out", "-o", metavar="DIR", help="Output directory."),
    ridge: float = typer.Option(
        0.0, "--ridge", envvar="BNSL_RIDGE", help="Ridge R ≥ 0: solves (S_pa,pa + R·I) w = S_pa,j with S = XᵀX/n_p of the centred rows (0: plain least squares)."
    ),
    truth_dir: Optional[Path] = typer.Option(
        None,
        "--truth-dir",
        metavar="DIR",
        help="Per-participant true weights (as `bnsl simulate --heterogeneous` writes in truths/): "
        "adds the normalised MSE ‖Ŵ_p − W*_p‖²/‖W*_p‖² per participant.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object per participant (a list) on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No table on stderr."),
    force: bool = typer.Option(False, "--force", help="Write into --out even if it holds files bnsl did not write."),
    **read,
) -> None:
    """Refit the edge weights of a learned DAG on each participant's own rows (personalisation).

    For every participant and node, least squares of the node on its parents in ESTIMATE, on that
    participant's rows centred with its own column means. Nothing crosses participants: each fit uses
    one shard only. Writes DIR/participant-NN.csv (weighted adjacency, W\\[i, j] = weight of i -> j,
    rows are parents) and DIR/summary.json.

    The shards are read as the learn run of ESTIMATE read them (its report.json's input: --index-col,
    --drop, --columns, --na, --header, --encoding, --decimal, --sep); an option given here replaces
    the recorded one.
    """
    import math

    import numpy as np

    from bnsl_cli import __version__
    from bnsl_cli.errors import InputDataError
    from bnsl_cli.io.shards import read_shards
    from bnsl_cli.io.outdir import OutputDir
    from bnsl_cli.io.graph_formats import read_graph
    from bnsl_cli.io.graphs import adjacency_csv_text, ORIENTATION
    from bnsl_cli.metrics import is_dag
    from bnsl_cli.refit import align_graph, refit_participants

    if str(out) == "-":  # not a folder named "-"
        raise common.fail(
            "--out takes a folder, not - (standard output); give a folder (--json also prints the refitted "
            "weights on stdout)", 2,
        )
    if not math.isfinite(ridge) or ridge < 0:
        raise common.fail(f"--ridge must be a finite number ≥ 0 (got {ridge:g})", 2)
    paths = common.expand_shard_paths(shards or [], files_from)
    if not paths:
        raise common.fail("no shards given: pass CSV files, a directory, or --files-from LIST", 2)
    est_path = _estimate_path(estimate)
    read_opts, reused = _read_options(ctx, est_path, sep, read)
    files = [_participant_file(k) for k in range(len(paths))]
    inputs = [*paths, est_path]
    truths_paths = _truth_paths(truth_dir, paths) if truth_dir is not None else None
    if truths_paths:
        inputs += truths_paths
    od = OutputDir(
        out, names=files + [SUMMARY], owned=("participant-*.csv", SUMMARY), marker=SUMMARY, inputs=inputs,
        force=force, is_ours=_is_refit_output,
    ).prepare()

    graph = read_graph(est_path)
    source = _source_report(est_path)
    kinds = (source or {}).get("columns") or {}
    categorical = [n for n, k in zip(kinds.get("names", ()), kinds.get("kinds", ())) if k == "categorical"]
    if categorical:  # before reading the shards: their text columns would only fail as "not a number"
        raise InputDataError(
            f"{est_path}: the learn run had categorical columns ({', '.join(map(repr, categorical[:3]))}"
            f"{', …' if len(categorical) > 3 else ''}); refit fits linear weights of continuous nodes only, and has no "
            "parameters for a categorical node in this version"
        )
    progress = common.read_progress(quiet)
    try:
        tables = read_shards(paths, progress=progress, options=read_opts)
    except InputDataError as exc:  # say which options came from the learn run (still one line)
        if not reused:
            raise
        raise type(exc)(f"{exc} (read with the options of the learn run: {reused}; give others here to "
                        "change them)") from None
    if progress is not None:
        progress.close()
    if reused and not quiet:
        common.err_console.print(
            f"read the shards as the learn run did ({reused}; recorded in its report.json's input)",
            highlight=False, markup=False,
        )
    names = tables[0].names
    structure = align_graph(graph, names, source=str(est_path))
    private = _private_source(est_path)
    if private is not None:
        import warnings

        from bnsl_cli.errors import PrivacyWarning

        warnings.warn(
            f"{est_path} comes from a differentially private run (ε = {epsilon_text(private.get('epsilon'))}): the structure is "
            "private, but the refitted weights use each participant's rows exactly and are NOT differentially "
            "private; keep each participant's weights with that participant",
            PrivacyWarning,
        )
    if not is_dag(structure != 0):
        import warnings

        warnings.warn(f"{est_path}: the structure has a directed cycle; each node is still fitted on its parents")
    truths = None
    if truths_paths:
        truths = [align_graph(read_graph(p), names, source=str(p)) for p in truths_paths]
        for p, T in zip(truths_paths, truths):
            if not np.any(T):
                raise InputDataError(f"{p}: the truth has no edges, the normalised MSE is undefined")
    fits = refit_participants([t.X for t in tables], structure, names, ridge=ridge, truths=truths)

    rows = []
    for k, (t, fit) in enumerate(zip(tables, fits)):
        rows.append(
            {
                "participant": fit.participant,
                "file": str(t.path),
                "rows": fit.rows,
                "edges": fit.edges,
                "mse": fit.mse,
                "output": str(out / files[k]),
                "truth": None if truths_paths is None else str(truths_paths[k]),
                "ridge": ridge,
                "rank_deficient": list(fit.rank_deficient),
                "residual_variance": {n: float(v) for n, v in zip(names, fit.residual_variance)},
            }
        )
    summary = {
        "schema_version": SCHEMA_VERSION,
        "generator": GENERATOR,
        "version": __version__,
        "orientation": ORIENTATION,
        "estimate": str(est_path),
        "nodes": list(names),
        "edges": int(np.count_nonzero(structure)),
        "options": {"ridge": ridge, "truth_dir": None if truth_dir is None else str(truth_dir)},
        "input": read_opts.used(tables).to_dict(),
        "locality": "each participant's weights are fitted on its own rows only (centred with its own "
        "column means); nothing is sent between participants or to a server",
        "privacy": "the refitted weights are not differentially private (exact least squares on each participant's "
        "rows)" + ("; the structure came from a private run" if private is not None else ""),
        "structure_privacy": None if private is None else {
            "epsilon": private.get("epsilon"), "delta": private.get("delta")
        },
        "participants": rows,
    }
    for fname, fit in zip(files, fits):
        od.write_text(fname, adjacency_csv_text(fit.W, names))
    od.write_text(SUMMARY, common.json_text(summary))
    od.commit()  # one unit: stale participant files of an earlier, larger refit go
    if not quiet:
        _render(rows)
        common.err_console.print(f"wrote {out}/")
    if json_out:
        common.print_json([{k: v for k, v in r.items() if k != "residual_variance"} for r in rows])
