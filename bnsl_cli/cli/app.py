"""The ``bnsl`` command: registers the subcommands and maps library exceptions to exit codes.

Exit codes (the table with the error classes is in :mod:`bnsl_cli.errors`): 0 ok, 1 internal error,
2 usage, 3 bad input data, 4 no DAG, 5 privacy budget invalid or impossible or a plan refused,
6 a networked run failed, 130 interrupted (Ctrl-C), 141 broken pipe, 143 terminated (SIGTERM;
handled like Ctrl-C: one line, no output left).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Optional

import typer

from bnsl_cli import __version__
from bnsl_cli.cli import common

_APP_OPTIONS = dict(
    name="bnsl",
    help=(
        "Learn the structure of a linear Gaussian Bayesian network from CSV shards held by several "
        "participants, without pooling their rows, optionally with differential privacy.\n\n"
        "Orientation: W\\[i, j] is the weight of the edge i -> j (rows are parents)."
    ),
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bnsl {__version__}")
        raise typer.Exit(0)


def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(
        False, "--debug", envvar="BNSL_DEBUG", help="Show the full traceback on errors."
    ),
) -> None:
    common.STATE["debug"] = debug


#: The subcommands, in the order ``--help`` lists them: (name, module in ``bnsl_cli.cli`` whose
#: ``command`` function it runs). A module is imported only when its subcommand is built.
SUBCOMMANDS = (
    ("simulate", "simulate"),
    ("split", "split"),
    ("learn", "learn"),
    ("evaluate", "evaluate"),
    ("refit", "refit"),
    ("privacy-budget", "privacy_budget"),
    ("show", "show"),
    # networked runs (need the extra bnsl-cli[net]; grpc/cryptography are imported when a command runs)
    ("serve", "serve"),
    ("join", "join"),
    ("certs", "certs"),
)
#: Options of the root command that may stand before the subcommand's name.
_ROOT_FLAGS = ("--debug",)


def build_app(names: Optional[set] = None) -> typer.Typer:
    """The ``bnsl`` application with the subcommands in ``names`` (all when ``None``).

    :func:`main` builds only the subcommand a command line names: the other eight modules are
    neither imported nor turned into click commands (about 0.05 s of every start-up; more where
    Python cannot cache bytecode). ``bnsl``, ``bnsl --help`` and any line that names no known
    subcommand get the whole application, so what a user sees is the same either way."""
    new = typer.Typer(**_APP_OPTIONS)
    new.callback()(_root)
    for name, module in SUBCOMMANDS:
        if names is None or name in names:
            command = importlib.import_module(f"bnsl_cli.cli.{module}").command
            new.command(name)(common.guarded(command))
    return new


def _subcommand_of(argv: list) -> Optional[str]:
    """The subcommand named by a command line (after any root flags), or ``None``."""
    known = {name for name, _ in SUBCOMMANDS}
    for arg in argv:
        if arg in _ROOT_FLAGS:
            continue
        return arg if arg in known else None
    return None


def hoist_root_flags(argv: list) -> list:
    """``bnsl learn … --debug`` means ``bnsl --debug learn …``: a root flag given after the
    subcommand (before any ``--``) is moved in front of it."""
    argv = list(argv)
    if _subcommand_of(argv) is None:
        return argv
    end = argv.index("--") if "--" in argv else len(argv)
    first = next(k for k, a in enumerate(argv) if a not in _ROOT_FLAGS)
    moved = [a for a in argv[first + 1 : end] if a in _ROOT_FLAGS]
    if not moved:
        return argv
    rest = [a for a in argv[first + 1 : end] if a not in _ROOT_FLAGS]
    return argv[:first] + sorted(set(moved)) + [argv[first]] + rest + argv[end:]


def _full_app() -> typer.Typer:
    return globals().get("app") or __getattr__("app")


def __getattr__(name: str):
    """``app`` (every subcommand) and ``COMMANDS`` ((name, command function) pairs, in ``--help``
    order) are built on first use, so importing this module stays cheap."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    if name == "COMMANDS":
        commands = [(n, importlib.import_module(f"bnsl_cli.cli.{m}").command) for n, m in SUBCOMMANDS]
        globals()["COMMANDS"] = commands
        return commands
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def _patch_rich_utils(rich_utils) -> None:
    if hasattr(rich_utils, "rich_format_error"):
        rich_utils.rich_format_error = _one_line_usage_error


class _RichUtilsHook:
    """Patches ``typer.rich_utils`` (which formats usage errors in typer's standalone mode, e.g. under
    ``CliRunner``) when it is first imported, instead of importing it — and rich's traceback and
    markdown modules with it, about 0.06 s — on every start-up: :func:`main` never needs it."""

    NAME = "typer.rich_utils"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.NAME:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch_rich_utils(module)

        spec.loader.exec_module = exec_module
        return spec


def _install_one_line_usage_errors() -> None:
    loaded = sys.modules.get(_RichUtilsHook.NAME)
    if loaded is not None:
        _patch_rich_utils(loaded)
    elif not any(isinstance(f, _RichUtilsHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _RichUtilsHook())


_install_one_line_usage_errors()


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point."""
    from bnsl_cli.errors import BnslError

    common.handle_sigterm()  # SIGTERM is handled like Ctrl-C: one line, cleanup, exit 143
    args = hoist_root_flags(sys.argv[1:] if argv is None else list(argv))
    name = _subcommand_of(args)
    application = build_app({name}) if name is not None else _full_app()
    try:
        rv = application(args=args, standalone_mode=False)  # returns a typer.Exit's code instead of exiting
    except BrokenPipeError:
        common.quiet_pipe_exit()
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (errors.Terminated)
        message, code = common.interrupted_message(exc)
        common.fail(message, code)
        sys.exit(code)
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
        _skip_teardown_gc()
        if isinstance(rv, int) and rv:
            sys.exit(rv)


def _skip_teardown_gc() -> None:
    """The command is done: move every live object out of the collector's reach, so that the
    interpreter's shutdown does not walk the whole heap (scipy, pandas, the results) once more
    before exiting. Objects are still freed and ``atexit`` handlers still run."""
    import gc

    gc.freeze()


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
