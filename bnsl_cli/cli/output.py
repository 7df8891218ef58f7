"""Writing a command's outputs safely (shared by learn, refit and split).

Folders go through :class:`bnsl_cli.io.outdir.OutputDir` (pre-flight, lock, one unit); single files
(``--adjacency PATH``, ``--edges PATH``) are checked before the run and written atomically, ``-``
meaning standard output.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

def prepare_learn_dir(out: Optional[Path], inputs, participants: int, per_participant: bool, force: bool,
                      strength: bool = False, formats=()):
    """The pre-flight of ``learn --out`` (None without ``--out``): :func:`bnsl_cli.io.run_folder.prepare_run_folder`."""
    if out is None:
        return None
    from bnsl_cli.io.run_folder import prepare_run_folder

    return prepare_run_folder(out, inputs, participants, per_participant, force, strength=strength, formats=formats)


def prepare_single_outputs(targets: dict, inputs, local: bool = False, stdout_option: Optional[str] = None) -> dict:
    """Check ``{option: path}`` single-file outputs before the run: at most one ``-`` (none when
    ``stdout_option``, e.g. ``--json``, already writes stdout), the folder exists and is writable, no
    input is overwritten. Returns the options that were given."""
    from bnsl_cli.io.outdir import OutputDirError

    given = {opt: p for opt, p in targets.items() if p is not None}
    if stdout_option is not None:
        taken = [opt for opt, p in given.items() if p == "-"]
        if taken:
            raise OutputDirError(f"{taken[0]} - and {stdout_option} both write to standard output; choose one")
    if local and given:
        raise OutputDirError(
            f"{', '.join(given)}: local-notears learns one graph per participant; use --out DIR"
        )
    if sum(p == "-" for p in given.values()) > 1:
        raise OutputDirError(f"{' and '.join(given)}: only one output can go to standard output (-)")
    ins = {Path(p).resolve() for p in inputs if str(p) != "-"}
    for opt, p in given.items():
        if p == "-":
            continue
        path = Path(p)
        if path.is_dir():
            raise OutputDirError(f"{opt} {p}: is a directory; give a file name")
        if path.resolve() in ins:
            raise OutputDirError(f"{opt} {p}: is an input and would be overwritten")
        parent = path.resolve().parent
        if not parent.is_dir():
            raise OutputDirError(f"{opt} {p}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputDirError(f"{opt} {p}: folder {parent} is not writable")
    return given


def check_formats(values, out, json_out: bool, singles: dict, local: bool = False) -> tuple:
    """The ``--format`` values (:func:`bnsl_cli.io.graph_export.parse_formats`), checked before the run:
    without ``--out`` one format, printed on stdout, so neither two formats, nor a run with one graph per
    participant, nor a second output on stdout (``--json``, ``--adjacency -``, ``--edges -``)."""
    from bnsl_cli.errors import OptionError
    from bnsl_cli.io.graph_export import parse_formats

    formats = parse_formats(values)
    if not formats or out is not None:
        return formats
    if len(formats) > 1:
        raise OptionError(f"--format {','.join(formats)}: without --out only one format can go to standard output; "
                          "add --out DIR to write them all")
    if local:
        raise OptionError("--format: local-notears learns one graph per participant; use --out DIR")
    taken = "--json" if json_out else next((opt for opt, p in singles.items() if p == "-"), None)
    if taken:
        raise OptionError(f"--format {formats[0]} (without --out) and {taken} both write to standard output; choose one")
    return formats


def stdout_format_text(formats, result) -> str:
    """The graph in the one ``--format`` a run without ``--out`` prints instead of its edge list."""
    from bnsl_cli.io.graph_export import export_texts
    from bnsl_cli.io.graphs import column_kinds_of

    weights = column_kinds_of(result.report) is None
    return next(iter(export_texts(formats[:1], result.W, result.names, weights).values()))


def write_single_outputs(given: dict, result) -> None:
    """Write ``--adjacency`` / ``--edges`` (``-``: standard output)."""
    from bnsl_cli.io.atomic import atomic_write_text
    from bnsl_cli.io.graphs import adjacency_csv_text, column_kinds_of, edges_csv_text

    for opt, p in given.items():
        if opt == "--adjacency":
            text = adjacency_csv_text(result.W, result.names)
        else:
            text = edges_csv_text(result.W, result.names, getattr(result, "confidence", None),
                                  column_kinds_of(result.report))
        if p == "-":
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            atomic_write_text(p, text)


def stdout_edges_text(result, tables) -> str:
    """The edge list printed without ``--out``. local-notears: every participant's graph, one CSV
    with a leading ``participant`` column (1-based) and the shard's ``file``."""
    from bnsl_cli.io.graphs import column_kinds_of, edges_csv_text

    if getattr(result, "local", None) is None:
        return edges_csv_text(result.W, result.names, getattr(result, "confidence", None),
                              column_kinds_of(result.report))
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["participant", "file", "source", "target", "weight"])
    for k, W in enumerate(result.local):
        body = edges_csv_text(W, result.names).splitlines()[1:]
        src = str(tables[k].path) if k < len(tables) else ""
        for row in csv.reader(body):
            writer.writerow([k + 1, src, *row])
    return buf.getvalue()


def write_learn_outputs(od, result, method: str, formats=()) -> None:
    """Write a run's output folder (``od``: a prepared :func:`prepare_learn_dir`) and commit it as one
    unit: :func:`bnsl_cli.io.run_folder.write_run_folder`, the one writer of a run's folder."""
    from bnsl_cli.io.run_folder import write_run_folder

    write_run_folder(od, result, method, formats)


def print_run_summary(result, out, quiet: bool) -> None:
    """The one-line summary of a finished run on stderr (and where its outputs went)."""
    from bnsl_cli.cli import common

    if quiet:
        return
    rep = result.report
    comm = rep.get("communication", {})
    edges = int((result.W != 0).sum()) if result.local is None else None
    parts = [f"[bold]{rep.get('method_label', rep['method'])}[/]", f"{rep.get('rounds')} rounds"]
    if edges is not None:
        parts.append(f"{edges} edges")
    pol = rep.get("polish") or {}
    if pol.get("applied"):
        ch = pol.get("changes") or {"added": pol["moves"]["add"], "deleted": pol["moves"]["delete"],
                                    "reversed": pol["moves"]["reverse"]}
        parts.append(  # net changes, after the threshold: before + added − deleted = after
            f"polish {pol['edges_before']} → {pol['edges_after']} edges "
            f"(+{ch['added']} −{ch['deleted']} ⇄{ch['reversed']})"
        )
    if comm.get("bytes_total"):
        parts.append(f"{comm['bytes_up'] / 1e6:.3f} MB up, {comm['bytes_down'] / 1e6:.3f} MB down")
    parts.append(f"{rep['timing']['wall_s']:.2f} s")
    if rep.get("privacy"):
        pv = rep["privacy"]
        parts.append(f"(ε = {pv['epsilon']:.3g}, δ = {pv['delta']:.2g})")
    common.err_console.print(", ".join(parts))
    kn = rep.get("knowledge")
    if kn:
        common.err_console.print(
            f"knowledge: {kn['required_count']} required, {kn['forbidden_count']} forbidden, "
            f"{kn['tier_count']} tiers ({kn['forbidden_pairs_total']} pairs excluded in all); "
            f"{kn['forbidden_in_graph']} forbidden in the graph, {len(kn['required_missing'])} required missing",
            highlight=False,
        )
    if out is not None:
        common.err_console.print(f"wrote {out}/")
