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


app.command("simulate")(common.guarded(_simulate.command))
app.command("split")(common.guarded(_split.command))
app.command("learn")(common.guarded(_learn.command))
app.command("evaluate")(common.guarded(_evaluate.command))
app.command("refit")(common.guarded(_refit.command))
app.command("privacy-budget")(common.guarded(_privacy_budget.command))
# networked runs (need the extra bnsl-cli[net]; grpc/cryptography are imported when a command runs)
from bnsl_cli.cli import certs as _certs, join as _join, serve as _serve  # noqa: E402

app.command("serve")(common.guarded(_serve.command))
app.command("join")(common.guarded(_join.command))
app.command("certs")(common.guarded(_certs.command))


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point."""
    from bnsl_cli.errors import BnslError

    try:
        app(args=argv, standalone_mode=True)
    except BnslError as exc:  # raised outside a command's own handler
        if common.STATE["debug"]:
            traceback.print_exc()
        common.fail(str(exc), exc.exit_code)
        sys.exit(exc.exit_code)
