"""The ``bnsl`` command: registers the subcommands and maps library exceptions to exit codes.

Exit codes: 0 ok, 1 internal error, 2 usage, 3 bad input data, 4 did not converge / no DAG,
5 privacy budget cannot be met.
"""

from __future__ import annotations

import sys
import traceback
from typing import Optional

import typer

from bnsl_cli import __version__
from bnsl_cli.cli import common
from bnsl_cli.cli import evaluate as _evaluate
from bnsl_cli.cli import learn as _learn
from bnsl_cli.cli import privacy_budget as _privacy_budget
from bnsl_cli.cli import refit as _refit
from bnsl_cli.cli import simulate as _simulate
from bnsl_cli.cli import split as _split
from bnsl_cli.cli import certs as _certs, join as _join, serve as _serve

app = typer.Typer(
    name="bnsl",
    help=(
        "Learn the structure of a linear Gaussian Bayesian network from CSV shards held by several "
        "participants, without pooling their rows, optionally with differential privacy.\n\n"
        "Orientation: W\\[i, j] is the weight of the edge i -> j (rows are parents)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bnsl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(
        False, "--debug", envvar="BNSL_DEBUG", help="Show the full traceback on errors."
    ),
) -> None:
    common.STATE["debug"] = debug


#: The subcommands, in the order ``--help`` lists them: (name, command function).
COMMANDS = [
    ("simulate", _simulate.command),
    ("split", _split.command),
    ("learn", _learn.command),
    ("evaluate", _evaluate.command),
    ("refit", _refit.command),
    ("privacy-budget", _privacy_budget.command),
    # networked runs (need the extra bnsl-cli[net]; grpc/cryptography are imported when a command runs)
    ("serve", _serve.command),
    ("join", _join.command),
    ("certs", _certs.command),
]
for _name, _command in COMMANDS:
    app.command(_name)(common.guarded(_command))


def _word_types() -> None:
    """``--help`` shows value types as words (FLOAT, INTEGER, PATH, TEXT, [a|b|c] for choices) and
    nothing for on/off flags, as click does, instead of typer ≥ 0.2x's ``<float>``/``<bool>``."""
    core = getattr(typer, "core", None)
    base = getattr(core, "_TyperParameter", None)
    original = getattr(base, "display_type", None)
    if original is None or getattr(original, "_bnsl_words", False):
        return  # an older typer already prints words

    words = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "bool": "BOOLEAN",
             "path": "PATH", "file": "FILE", "directory": "DIR"}

    def display_type(self, ctx):
        if getattr(self, "is_bool_flag", False) or getattr(self, "is_flag", False):
            return None
        desc = getattr(self, "type_descriptor", None)
        if desc is not None and getattr(desc, "is_choice", False):
            return "[" + original(self, ctx).strip("<>").removeprefix("list[").removesuffix("]") + "]"
        label = original(self, ctx).strip("<>")
        if label.startswith("list[") and label.endswith("]"):
            label = label[5:-1]
        return words.get(label, label.upper())

    display_type._bnsl_words = True
    base.display_type = display_type


_word_types()


def _one_line_usage_error(exc) -> None:
    """A usage error (unknown option, bad value) is one line on stderr, like every other error."""
    if exc.__class__.__name__ == "NoArgsIsHelpError":
        return
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    common.fail(" ".join(exc.format_message().split()) + hint, getattr(exc, "exit_code", 2))


def _install_one_line_usage_errors() -> None:
    rich_utils = getattr(typer, "rich_utils", None)
    if rich_utils is None:
        try:
            from typer import rich_utils  # type: ignore[no-redef]
        except ImportError:  # pragma: no cover
            return
    if hasattr(rich_utils, "rich_format_error"):
        rich_utils.rich_format_error = _one_line_usage_error


_install_one_line_usage_errors()


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point."""
    from bnsl_cli.errors import BnslError

    try:
        rv = app(args=argv, standalone_mode=False)  # returns a typer.Exit's code instead of exiting
    except BrokenPipeError:
        common.quiet_pipe_exit()
    except KeyboardInterrupt:
        common.fail("interrupted; no output was left half-written", 130)
        sys.exit(130)
    except typer.Exit as exc:
        code = exc.exit_code
        _flush_or_quiet()
        sys.exit(code)
    except BnslError as exc:  # raised outside a command's own handler
        if common.STATE["debug"]:
            traceback.print_exc()
        common.fail(str(exc), exc.exit_code)
        sys.exit(exc.exit_code)
    except Exception as exc:  # click's usage errors and aborts
        _click_error(exc)
    else:
        _flush_or_quiet()
        if isinstance(rv, int) and rv:
            sys.exit(rv)


def _flush_or_quiet() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        common.quiet_pipe_exit()


def _click_error(exc: Exception) -> None:
    click_exc = getattr(typer, "_click", None)
    exceptions = getattr(click_exc, "exceptions", None) if click_exc is not None else None
    if exceptions is None:
        import click as click_mod  # older typer

        exceptions = click_mod.exceptions
    if isinstance(exc, exceptions.ClickException):
        _one_line_usage_error(exc)
        sys.exit(exc.exit_code)
    if isinstance(exc, exceptions.Abort):  # Ctrl-C inside a prompt
        common.fail("interrupted; no output was left half-written", 130)
        sys.exit(130)
    raise exc
