"""Options shared by every command that reads data files: which columns and rows are used and how
the text is read (``--columns``, ``--drop``, ``--index-col``, ``--na``, ``--header``, ``--encoding``,
``--decimal``), the separator and ``--files-from``; and the help-panel names the commands group their
options by.

Each ``*_option()`` returns a fresh ``typer.Option`` for a command's signature;
:func:`with_read_options` gives a command the seven reading options at once; :func:`read_options`
turns the values into the library's :class:`~bnsl_cli.io.table.ReadOptions`; :func:`given_options`
and :func:`reuse_read_options` let a command start from options recorded by an earlier run.
"""

from __future__ import annotations

import inspect
import warnings
from contextlib import contextmanager
from typing import Optional

import typer

#: Help panels (``--help`` groups the options of learn, serve and join under these titles).
INPUT = "Input"
METHOD = "Method"
PRIVACY = "Privacy"
KNOWLEDGE = "Knowledge"
OUTPUT = "Output"
NETWORK = "Network"


def columns_option(panel: Optional[str] = INPUT):
    return typer.Option(
        None, "--columns", metavar="A,B,...", rich_help_panel=panel,
        help="Use only these columns, in this order (comma-separated names); every shard must hold them, "
        "other columns are ignored (they may hold text).",
    )


def drop_option(panel: Optional[str] = INPUT):
    return typer.Option(
        None, "--drop", metavar="A,B,...", rich_help_panel=panel,
        help="Leave out these columns (comma-separated names; they may hold text).",
    )


def categorical_option(panel: Optional[str] = INPUT):
    return typer.Option(
        None, "--categorical", metavar="A,B,...", rich_help_panel=panel,
        help="Treat these columns as categorical (levels as written, e.g. integer codes). Without --dp a "
        "column of text is categorical anyway.",
    )


def max_levels_option(panel: Optional[str] = INPUT):
    from bnsl_cli.io.kinds import MAX_LEVELS

    return typer.Option(
        MAX_LEVELS, "--max-levels", metavar="K", rich_help_panel=panel,
        help="Refuse a categorical column with more levels than this (an identifier or free text).",
    )


def text_columns(paths, read_opts) -> tuple[list, list]:
    """``(the first file's header, its columns of text that the read options keep)``: the files' first
    rows looked at once (:func:`bnsl_cli.io.kinds.text_columns_of`); a text ``--index-col`` is no column."""
    from bnsl_cli.io.csv_reader import file_separator
    from bnsl_cli.io.kinds import text_columns_of

    header, text = text_columns_of(paths, lambda p: file_separator(p, read_opts), read_opts.decimal)
    return header, [c for c in text if c not in (read_opts.drop or ()) and c != read_opts.index_col
                    and (not read_opts.columns or c in read_opts.columns)]


def categorical_tables(header, text, tables_reader, declared, max_levels: int, read_opts):
    """Read the shards with their categorical columns (``declared``, and ``text``: the columns of text,
    :func:`text_columns`) as indicator columns: ``(tables, kinds)``; ``kinds`` is ``None`` when there are
    none (the tables are then read exactly as before). ``tables_reader(keep)`` reads them keeping those
    columns' text; ``header`` gives the variables' order."""
    from bnsl_cli.io import kinds as K

    wanted = list(declared or ()) + [c for c in text if c not in (declared or ())]
    if read_opts.columns:
        wanted = [c for c in wanted if c in read_opts.columns]
    wanted = [c for c in wanted if c not in (read_opts.drop or ()) and c != read_opts.index_col]
    if not wanted:
        return tables_reader(()), None
    tables = tables_reader(tuple(wanted))
    return K.encode(tables, wanted, max_levels, na_drop=read_opts.na == "drop-rows",
                    order=list(read_opts.columns) if read_opts.columns else header)


def categorical_names(text: Optional[str]) -> tuple:
    """``--categorical A,B``: the names (empty entries refused)."""
    if text is None:
        return ()
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise typer.BadParameter(f"{text!r} has an empty name; give column names separated by commas")
    return names


def index_col_option(panel: Optional[str] = INPUT):
    return typer.Option(
        None, "--index-col", metavar="NAME", rich_help_panel=panel,
        help="A row-identifier column (any text): left out of the variables.",
    )


def na_option(panel: Optional[str] = INPUT):
    return typer.Option(
        "error", "--na", metavar="[error|drop-rows]", rich_help_panel=panel,
        help="Missing values (an empty cell, NA, N/A, NaN, null, None, ?) in the used columns: error, or "
        "drop-rows (drop every row holding one; the row counts after dropping are the ones used, and public "
        "under --dp: docs/privacy.md).",
    )


def header_option(panel: Optional[str] = INPUT):
    return typer.Option(
        "auto", "--header", metavar="[auto|yes|no]", rich_help_panel=panel,
        help="Whether the first line holds the column names. auto: yes unless it holds only numbers — a "
        "first line of integers over rows with decimals counts as names (e.g. gene ids); yes: always "
        "(numeric names accepted); no: the file has no header, columns are named V1, V2, …",
    )


def encoding_option(panel: Optional[str] = INPUT):
    return typer.Option(
        "utf-8", "--encoding", metavar="NAME", rich_help_panel=panel,
        help="Text encoding of the data files (e.g. latin-1, cp1252, utf-16).",
    )


def decimal_option(panel: str | None = INPUT):
    return typer.Option(
        ".", "--decimal", metavar="[.|,]", rich_help_panel=panel,
        help="Decimal mark of the numbers: . (1.5) or , (1,5) — in every file not separated by ',' (a comma-separated "
        "file keeps .), so ';' sites with 1,5 read beside ',' sites.",
    )


def sep_option(panel: Optional[str] = INPUT, what: str = "the data files", extra: str = ""):
    return typer.Option(
        None, "--sep", envvar="BNSL_SEP", show_default=False, rich_help_panel=panel,
        help=f"Field separator of {what}: one character, or 'tab' \\[default: each file's own, detected among "
        f"',' ';' tab '|'].{extra}",
    )


def with_read_options(after: str, panel: Optional[str] = INPUT):
    """Decorator: the command's ``**read`` becomes the seven options that say how the data files are
    read (``--columns``, ``--drop``, ``--index-col``, ``--na``, ``--header``, ``--encoding``,
    ``--decimal``), listed in ``--help`` after the parameter ``after``. The command passes ``read``
    to :func:`read_options`."""

    def decorate(command):
        sig = inspect.signature(command)
        params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        at = [p.name for p in params].index(after) + 1
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        block = [
            inspect.Parameter(name, kind, default=make(panel), annotation=annotation)
            for name, make, annotation in (
                ("columns", columns_option, Optional[str]),
                ("drop", drop_option, Optional[str]),
                ("index_col", index_col_option, Optional[str]),
                ("na", na_option, str),
                ("header", header_option, str),
                ("encoding", encoding_option, str),
                ("decimal", decimal_option, str),
            )
        ]
        command.__signature__ = sig.replace(parameters=params[:at] + block + params[at:])
        return command

    return decorate


def files_from_option(panel: Optional[str] = INPUT):
    return typer.Option(
        None, "--files-from", rich_help_panel=panel,
        help="A file listing shard paths, one per line (- reads the list from standard input); relative paths "
        "are relative to the current directory (as with tar -T).",
    )


def verbose_option(panel: Optional[str] = OUTPUT):
    return typer.Option(
        False, "--verbose", "-v", envvar="BNSL_VERBOSE", rich_help_panel=panel,
        help="Also print the optimiser's convergence warnings (they are always in report.json's warnings).",
    )


@contextmanager
def convergence_warnings(verbose: bool):
    """Inside: the library's :class:`~bnsl_cli.errors.ConvergenceWarning` s are printed only with
    ``--verbose``. The run report keeps them either way (``warnings``); on a default run they are
    rarely something a user can act on (a stricter tolerance than the graph needs, an inner solver's
    iteration cap), so they do not crowd the console."""
    if verbose:
        yield
        return
    from bnsl_cli.errors import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def exact_scale_warning(tables) -> None:
    """In a private run the coordinator's column spreads are noisy, so it does not warn about the
    columns' scales; whoever holds the rows warns from their exact spreads (nothing is released)."""
    from bnsl_cli.errors import ScaleWarning
    from bnsl_cli.stats import exact_scale_warning as check

    import numpy as np

    with np.errstate(all="ignore"):  # extreme rows: an infinite spread is simply not compared
        msg = check(tables, tables[0].names)
    if msg:
        warnings.warn(msg + " (checked on the rows here; the private run's own statistics are noisy)", ScaleWarning,
                      stacklevel=2)


def split_names(text: Optional[str]) -> Optional[tuple]:
    """:func:`bnsl_cli.io.table.split_names` (imported when called: start-up stays light)."""
    from bnsl_cli.io.table import split_names as split

    return split(text)


def read_options(
    columns: Optional[str] = None,
    drop: Optional[str] = None,
    index_col: Optional[str] = None,
    na: str = "error",
    header: str = "auto",
    encoding: str = "utf-8",
    decimal: str = ".",
    sep: str | None = None,
):
    """The :class:`~bnsl_cli.io.table.ReadOptions` of these option values, checked (an
    :class:`~bnsl_cli.errors.OptionError`, exit 2, when they contradict each other)."""
    from bnsl_cli.io.table import ReadOptions

    return ReadOptions(
        columns=split_names(columns), drop=split_names(drop) or (), index_col=index_col, na=na, header=header,
        encoding=encoding, decimal=decimal, sep=sep,
    ).check()


#: The parameter names of the reading options (:func:`with_read_options`) and ``--sep``.
READ_NAMES = ("columns", "drop", "index_col", "na", "header", "encoding", "decimal", "sep")


def given_options(ctx, names=READ_NAMES) -> set:
    """The options among ``names`` (parameter names) given on the command line or by a ``BNSL_*``
    variable, rather than left at their defaults."""
    out = set()
    for name in names:
        src = ctx.get_parameter_source(name)
        if src is not None and getattr(src, "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP"):
            out.add(name)
    return out


def reuse_read_options(recorded, values: dict):
    """``recorded`` (the :class:`~bnsl_cli.io.table.ReadOptions` of an earlier run) with the option
    values in ``values`` (parameter name → the command line's text, as :func:`read_options` takes
    them) put in their place; its record of separators is not carried over. Checked."""
    from dataclasses import replace

    given = dict(values)
    for name in ("columns", "drop"):
        if name in given:
            given[name] = split_names(given[name]) or (None if name == "columns" else ())
    return replace(recorded, separators=(), **given).check()


def recorded_flags(opts) -> str:
    """``opts`` (:class:`~bnsl_cli.io.table.ReadOptions`) as the command-line flags that differ from the
    defaults, e.g. ``--index-col id --decimal ,`` (empty when none do)."""
    from bnsl_cli.io.table import ReadOptions

    default = ReadOptions()
    parts = []
    for name, flag in (("columns", "--columns"), ("drop", "--drop"), ("index_col", "--index-col"), ("na", "--na"),
                       ("header", "--header"), ("encoding", "--encoding"), ("decimal", "--decimal"),
                       ("sep", "--sep")):
        value = getattr(opts, name)
        if value == getattr(default, name):
            continue
        if isinstance(value, tuple):
            value = ",".join(value)
        text = "tab" if value == "\t" else value
        parts.append(f"{flag} {text if text and ' ' not in text and text not in '|;' else repr(text)}")
    return " ".join(parts)
