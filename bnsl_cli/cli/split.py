"""`bnsl split`: cut one CSV file into participant shards."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Optional

import typer

from bnsl_cli.cli import dataopts as _dataopts
from bnsl_cli.cli.common import err_console, fail, print_json

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


class Mode(str, enum.Enum):
    random = "random"
    contiguous = "contiguous"
    sizes = "sizes"
    group = "group"


def _parse_sizes(text: str) -> list[float]:
    import math

    try:
        values = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise fail(f"--sizes must be comma-separated proportions such as 0.5,0.3,0.2 (got {text!r})", 2) from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise fail(f"--sizes needs proportions > 0 such as 0.5,0.3,0.2 (got {text!r})", 2)
    if abs(sum(values) - 1.0) > 1e-6:
        raise fail(f"--sizes must sum to 1 (got {text!r}, sum {sum(values):.6g})", 2)
    return values


@_dataopts.with_read_options(after="seed", panel=None)
def command(
    data: Path = typer.Argument(
        ..., metavar="DATA.csv",
        help="The CSV file to split (header row, numeric values; .tsv and .gz too); never modified.",
    ),
    participants: Optional[int] = typer.Option(
        None,
        "--participants",
        "-p",
        help="Number of shards P. Optional with --sizes (their count) and --by (the number of distinct values).",
    ),
    out: Path = typer.Option(..., "--out", "-o", metavar="DIR", help="Output directory for participant-NN.csv."),
    mode: Optional[Mode] = typer.Option(
        None,
        "--mode",
        case_sensitive=False,
        help="random (default; equal sizes ±1, seeded), contiguous (blocks in file order), "
        "sizes (see --sizes), group (see --by).",
    ),
    sizes: Optional[str] = typer.Option(
        None, "--sizes", metavar="Q1,Q2,...", help="Proportions summing to 1, e.g. 0.5,0.3,0.2 (implies --mode sizes; rows drawn at random)."
    ),
    by: Optional[str] = typer.Option(
        None, "--by", metavar="COLUMN", help="Column whose values define the shards, one per value, sorted; the column is dropped (implies --mode group)."
    ),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Seed for random and sizes modes (>= 0); without it one is drawn and reported."
    ),
    force: bool = typer.Option(
        False, "--force", help="Write into a non-empty directory (also removes stale participant-*.csv there)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the shard table as JSON on stdout."),
    sep: Optional[str] = typer.Option(
        None, "--sep", envvar="BNSL_SEP", show_default=False,
        help="Field separator of DATA: one character, or 'tab' \\[default: detected among ',' ';' tab '|'; ',' for "
        "standard input]; the shards are comma-separated CSV.",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No table on stderr."),
    **read,
) -> None:
    """Split the rows of DATA.csv into P participant shards DIR/participant-01.csv … (every row exactly once).

    DATA is read as bnsl learn reads it, with the same options (--columns, --drop, --index-col, --na,
    --header, --encoding, --decimal, --sep). Values are copied with their original text and the header
    names are kept; text columns (sex, species, yes/no) are copied as text, --na drop-rows leaves out the
    rows with a missing number before the split, and --by takes a column of numbers or text. The shards
    are UTF-8, comma-separated, with '.' as the decimal mark. DIR/manifest.json records the input, the
    options, mode, seed and every shard (with --by: which group went to which file).
    """
    import numpy as np

    from bnsl_cli.io.outdir import OutputDir
    from bnsl_cli.split import split_table_file

    # --- options -------------------------------------------------------------------------------
    if str(out) == "-":  # not a folder named "-"
        raise fail(
            "--out takes a folder for the shards, not - (standard output); give a folder (--json also prints "
            "the shard table on stdout)", 2,
        )
    implied = "sizes" if sizes is not None else "group" if by is not None else None
    if sizes is not None and by is not None:
        raise fail("--sizes and --by cannot be combined; choose one", 2)
    chosen = mode.value if mode is not None else (implied or "random")
    if implied and chosen != implied:
        raise fail(f"--{'sizes' if implied == 'sizes' else 'by'} implies --mode {implied}, not {chosen}", 2)
    if chosen == "sizes" and sizes is None:
        raise fail("--mode sizes needs --sizes, e.g. --sizes 0.5,0.3,0.2", 2)
    if chosen == "group" and by is None:
        raise fail("--mode group needs --by COLUMN", 2)
    proportions = _parse_sizes(sizes) if sizes is not None else None
    if participants is not None and participants < 1:
        raise fail(f"--participants must be >= 1 (got {participants})", 2)
    if proportions is not None and participants is not None and participants != len(proportions):
        raise fail(f"--sizes gives {len(proportions)} proportions but --participants is {participants}", 2)
    if chosen in ("random", "contiguous") and participants is None:
        raise fail(f"--mode {chosen} needs --participants P", 2)
    if seed is not None and seed < 0:
        raise fail(f"--seed must be >= 0 (got {seed})", 2)
    seed_given = seed is not None
    if chosen in ("random", "sizes") and seed is None:
        seed = int(np.random.SeedSequence().entropy)

    if out.exists() and not out.is_dir():
        raise fail(f"{out}: exists and is not a directory; choose another --out", 2)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise fail(f"{out}: directory is not empty; choose another --out or add --force", 2)

    # --- read and split (nothing is written before this succeeded) ------------------------------
    from bnsl_cli.cli import dataopts

    opts = dataopts.read_options(**read)
    if sep is None:  # the file's own separator, detected as the reader detects it (the splitter copies its cells)
        from bnsl_cli.io.csv_reader import file_separator

        sep = file_separator(data, opts)
    try:
        result = split_table_file(data, participants, mode=chosen, sizes=proportions, by=by, seed=seed, sep=sep,
                                  options=opts)
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    P = len(result.texts)
    width = max(2, len(str(P)))
    files = [f"participant-{k:0{width}d}.csv" for k in range(1, P + 1)]
    src = os.path.realpath(data)
    if any(os.path.realpath(out / f) == src for f in files):
        raise fail(f"{data}: the output would overwrite the input; choose another --out", 2)
    _check_shard_sizes(result, chosen, data)

    # one unit: shards of an earlier, larger split (which would be read as participants) go
    od = OutputDir(
        out, names=files + [MANIFEST], owned=("participant-*.csv", MANIFEST), marker=MANIFEST,
        inputs=[data], force=True,
    ).prepare()
    for name, text in zip(files, result.texts):
        od.write_text(name, text)

    shards = []
    for k, (name, idx, group) in enumerate(zip(files, result.indices, result.groups), start=1):
        entry = {"participant": k, "path": name, "rows": int(idx.size)}
        if by is not None:
            entry["group"] = group
        shards.append(entry)
    summary = {
        "schema_version": SCHEMA_VERSION,
        "input": str(data),
        "out": str(out),
        "rows": result.n_rows,
        "columns": list(result.header),
        "mode": chosen,
        "participants": P,
        "seed": seed,
        "seed_given": seed_given,
        "by": by,
        "sizes": proportions,
        "text_columns": list(result.text_columns),
        "dropped_rows": result.dropped_rows,
        "read": {k: v for k, v in (("columns", read.get("columns")), ("drop", read.get("drop")),
                                   ("index_col", read.get("index_col")), ("na", read.get("na")),
                                   ("header", read.get("header")), ("encoding", read.get("encoding")),
                                   ("decimal", read.get("decimal"))) if v is not None},
        "shards": shards,
    }
    if by is not None:
        summary["groups"] = {str(s["group"]): s["path"] for s in shards}
    import json

    od.write_text(MANIFEST, json.dumps(summary, indent=2, allow_nan=False) + "\n")
    od.commit()
    if not quiet:
        _print_table(summary)
    if json_out:
        print_json(summary)


def _check_shard_sizes(result, mode: str, data: Path) -> None:
    """Refuse (exit 3, nothing written) a split that gives a shard fewer rows than ``bnsl learn``
    accepts (:data:`~bnsl_cli.io.data.MIN_ROWS`); rows are never moved between shards to avoid it
    (that would change the shares or groups asked for)."""
    from bnsl_cli.errors import InputDataError
    from bnsl_cli.io.shards import MIN_ROWS

    sizes = [int(idx.size) for idx in result.indices]
    small = [k for k, m in enumerate(sizes) if m < MIN_ROWS]
    if not small:
        return
    k = small[0]
    if mode == "group":
        fix = f"group {result.groups[k]!r} has {sizes[k]} row(s); merge small groups or split by another column"
    elif mode == "sizes":
        fix = f"shard {k + 1} would get {sizes[k]} row(s); use larger proportions"
    else:
        fix = f"use at most {result.n_rows // MIN_ROWS} participants"
    raise InputDataError(
        f"{data}: a shard would get fewer than {MIN_ROWS} rows, fewer than bnsl learn accepts; {fix}"
    )


def _print_table(summary: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None, box=None, pad_edge=False, header_style="bold")
    table.add_column("participant", justify="right")
    table.add_column("file")
    if summary["by"] is not None:
        table.add_column(Text(summary["by"]))
    table.add_column("rows", justify="right")
    table.add_column("share", justify="right")
    n = summary["rows"]
    for s in summary["shards"]:
        cells = [str(s["participant"]), s["path"]]
        if summary["by"] is not None:
            cells.append(str(s["group"]))
        cells += [str(s["rows"]), f"{s['rows'] / n:.1%}"]
        table.add_row(*(Text(c) for c in cells))
    err_console.print(table, markup=False)
    seed = f", seed {summary['seed']}" if summary["seed"] is not None else ""
    err_console.print(
        f"split {summary['input']} ({n} rows, mode {summary['mode']}{seed}) into "
        f"{summary['participants']} shards in {summary['out']}/",
        soft_wrap=True,
        markup=False,
    )
