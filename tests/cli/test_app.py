"""The ``bnsl`` application: start-up imports, --help wording, subcommand registration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import COMMANDS, app

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("scipy", "pandas", "networkx")


def _imported_after(code: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_cli_import_and_help_load_no_heavy_module():
    assert _imported_after("import bnsl_cli.cli.app") == []
    help_run = (
        "from bnsl_cli.cli.app import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['{cmd}', '--help'])\n"
        "    except SystemExit:\n"
        "        pass"
    )
    for cmd in ("learn", "privacy-budget", "evaluate"):
        assert _imported_after(help_run.replace("{cmd}", cmd)) == [], cmd


def test_privacy_budget_loads_neither_pandas_nor_networkx():
    code = (
        "from bnsl_cli.cli.app import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['privacy-budget', '--epsilon', '5', '--samples', '5000', '--json'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), e.code"
    )
    assert not {"pandas", "networkx"} & set(_imported_after(code))


def run_help(*args):
    return CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "250"})


def test_help_shows_types_as_words_and_the_choices():
    learn = run_help("learn").stdout
    method_help = learn[learn.index("--method"):learn.index("--lambda")]
    assert "METHOD" in method_help
    for choice in ("fed-sparse", "fed-bnsl", "notears", "local-notears"):
        assert choice in method_help, choice
    assert "[tight|simple]" in learn and "[auto|adaptive|static]" in learn
    for word in ("FLOAT", "INTEGER", "PATH"):
        assert word in learn, word
    for bad in ("<bool>", "<float>", "<int>", "<path>", "<str>", "<list"):
        assert bad not in learn, bad
    sim = run_help("simulate").stdout
    assert "[er|sf]" in sim and "<" not in sim.replace("<->", "")


def test_method_choices_are_the_library_methods():
    """The --method help of learn names every method of the registry, privacy-budget's every private
    one, and both options leave the default to the registry (``default_method``: learn's help names
    both defaults, privacy-budget's the --dp one)."""
    import inspect

    from bnsl_cli.cli import learn as cli_learn
    from bnsl_cli.cli import privacy_budget as cli_pb
    from bnsl_cli.federated.methods.registry import METHODS, PRIVATE_METHODS, default_method

    for name in METHODS:
        assert name in cli_learn.METHOD_HELP, name
    pb_help = run_help("privacy-budget").stdout
    for name in PRIVATE_METHODS:
        assert name in " ".join(pb_help.split()).replace("│", ""), name
    for module in (cli_learn, cli_pb):
        default = inspect.signature(module.command).parameters["method"].default
        assert getattr(default, "default", default) is None, module.__name__
    assert f"[default: {default_method(False)}; {default_method(True)} with --dp]" in cli_learn.METHOD_HELP.replace("\\[", "[")
    assert f"default: {default_method(True)}, learn --dp's" in " ".join(pb_help.split()).replace("│ ", "").replace(" │", "")


def test_every_subcommand_is_registered_and_has_quiet():
    names = [n for n, _ in COMMANDS]
    assert names[:6] == ["simulate", "split", "learn", "evaluate", "refit", "privacy-budget"]
    for name in names:
        assert "--quiet" in run_help(name).stdout, name


@pytest.mark.parametrize("args", [("learn", "--rounds", "abc", "x.csv"), ("learn", "--bogus"), ("split", "a.csv")])
def test_usage_errors_are_one_line(args):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "--help" in lines[0], res.stderr


def test_the_readme_test_command_prints_the_summary_line():
    """README: ``python -m pytest -q`` ends with "N passed" (``-q`` twice, via addopts, hides it)."""
    target = "tests/cli/test_app.py::test_method_choices_are_the_library_methods"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target],
        capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 0, out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith("1 passed"), out.stdout


def test_read_progress_lines_for_large_inputs_only():
    import io

    from rich.console import Console

    from bnsl_cli.cli import common

    buf = io.StringIO()
    small = common.read_progress(quiet=False, console=Console(file=buf, width=10_000))
    for done in range(0, 1 << 20, 1 << 16):
        small(done, 1 << 20)
    small.close()
    assert buf.getvalue() == ""  # a small input reads silently
    big = common.read_progress(quiet=False, console=Console(file=buf, width=10_000))
    total = 3 * common.LARGE_READ_BYTES
    for done in range(0, total + 1, 1 << 22):
        big(done, total)
    big.close()
    lines = buf.getvalue().splitlines()
    assert lines[0] == f"reading {total / 1e6:.0f} MB …" and lines[-1].startswith(f"read {total / 1e6:.0f} MB in ")
    assert len(lines) == 2
    assert common.read_progress(quiet=True) is None


def test_main_builds_only_the_named_subcommand():
    """``main`` imports the module of the subcommand it runs, not the other eight, nor typer's
    rich_utils (patched when it is imported: usage errors stay one line under CliRunner too)."""
    code = (
        "from bnsl_cli.cli.app import main\n"
        "import contextlib, io, sys\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['--debug', 'privacy-budget', '--epsilon', '5', '--samples', '5000', '--json'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), e.code\n"
        "mods = ('simulate', 'split', 'learn', 'evaluate', 'refit', 'serve', 'join', 'certs', 'privacy_budget')\n"
        "print(','.join(m for m in mods if 'bnsl_cli.cli.' + m in sys.modules))\n"
        "print('typer.rich_utils' in sys.modules)\n"
        "from typer.testing import CliRunner\n"
        "from bnsl_cli.cli.app import app\n"
        "res = CliRunner().invoke(app, ['learn', '--bogus'])\n"
        "print(res.exit_code, len([ln for ln in res.stderr.splitlines() if ln.strip()]), 'typer.rich_utils' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    loaded, rich_utils, usage = out.stdout.strip().splitlines()
    assert loaded == "privacy_budget"
    assert rich_utils == "False"
    assert usage == "2 1 True"  # rich_utils was imported by typer and is patched: one line


@pytest.mark.parametrize("name", ["learn", "simulate", "privacy-budget", "certs"])
def test_one_subcommand_app_shows_the_same_help_and_errors(name):
    from bnsl_cli.cli.app import build_app

    single = build_app({name})
    for args in ([name, "--help"], [name, "--bogus-option"]):
        a = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        b = CliRunner().invoke(single, args, env={"COLUMNS": "200"})
        assert (a.exit_code, a.stdout, a.stderr) == (b.exit_code, b.stdout, b.stderr), args


def test_learn_on_a_small_input_imports_neither_pandas_nor_scipy_optimize(tmp_path):
    """The start-up budget of ``bnsl learn`` (issue 13): a small input is read without pandas and
    fed-sparse never needs scipy.optimize (only fed-bnsl's W-step does)."""
    shards = ROOT / "examples" / "tiny" / "shards"
    code = (
        "import sys\n"
        "from bnsl_cli.cli.app import main\n"
        "try:\n"
        f"    main(['learn', {str(shards)!r}, '--out', {str(tmp_path / 'out')!r}, '-q', '--rounds', '5'])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "print(','.join(m for m in ('pandas', 'scipy.optimize', 'networkx', 'pydot', 'bnsl_cli.cli.simulate') if m in sys.modules))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "", out.stdout
    assert (tmp_path / "out" / "report.json").exists()
