"""The one in-process runner of ``bnsl`` in the tests: ``run("learn", shards, "--rounds", 5)`` is the
command line ``bnsl learn <shards> --rounds 5``, run through typer's CliRunner on the real app."""

from __future__ import annotations

from typer.testing import CliRunner

from bnsl_cli.cli.app import app


def run(*args, input=None, env=None, catch_exceptions: bool = True):
    """``bnsl *args`` in-process: every argument is passed as ``str(arg)`` (paths, numbers), ``input``
    is standard input, ``env`` sets environment variables for the run, and ``catch_exceptions=False``
    lets an exception escape (CliRunner's default keeps it in the result). Returns click's Result:
    ``exit_code``, ``stdout``, ``stderr``, ``output``."""
    return CliRunner().invoke(app, [str(a) for a in args], input=input, env=env, catch_exceptions=catch_exceptions)
