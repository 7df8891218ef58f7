"""The README's commands print what the README shows (issue 46, item 4).

Every ```console block of README.md is read: a line starting with ``$ `` is a command (a trailing ``\\``
continues it on the next line, ``# exit code N`` after it is the exit code it must end with), and the lines
after it, up to the next ``$`` line or the end of the block, are what it prints. ``…`` stands for text left
out: a line that is only ``…`` skips any number of printed lines, and a line with ``…`` in it must match one
printed line whose text holds the parts before, between and after the ``…`` in that order. Every other
quoted line must be a printed line (stdout or stderr, trailing blanks aside). A quoted ``error:`` line means
the command fails; otherwise it must succeed.

The commands run in the README's order (later ones read what earlier ones wrote) in a temporary folder that
holds a copy of the example folders they name, so ``--out DIR`` and the files they read are relative to it
and nothing is written into the repository. ``bnsl`` runs in-process (``CliRunner``, as
tests/cli/test_real_data.py runs the own-data walk-through); ``head -N FILE`` and ``cat FILE`` are read
here.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ELIDED = "…"


@dataclass
class Run:
    command: str
    line: int  # the README line of the ``$`` (1-based)
    shown: list[str] = field(default_factory=list)


def console_runs(text: str) -> list[Run]:
    """Every ``$`` command of every ```console block, with the lines shown under it."""
    runs: list[Run] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        current: Run | None = None
        while i < len(lines) and lines[i].strip() != "```":
            ln = lines[i]
            if ln.startswith("$ "):
                start = i
                cmd = ln[2:]
                while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd.rstrip()[:-1].rstrip() + " " + lines[i].strip()
                current = Run(cmd, start + 1)
                runs.append(current)
            elif current is not None:
                current.shown.append(ln)
            i += 1
        i += 1
    return runs


def expected_exit(command: str) -> int | None:
    m = re.search(r"#\s*exit code (\d+)\s*$", command)
    return int(m.group(1)) if m else None


def line_matches(shown: str, printed: str) -> bool:
    """``printed`` is the line ``shown`` quotes: equal, or with ``…`` for any text (at least the parts)."""
    shown, printed = shown.rstrip(), printed.rstrip()
    if ELIDED not in shown:
        return shown == printed
    pos = 0
    for part in (p.strip() for p in shown.split(ELIDED)):
        if not part:
            continue
        at = printed.find(part, pos)
        if at < 0:
            return False
        pos = at + len(part)
    return True


def unmatched(shown: list[str], printed: list[str]) -> list[str]:
    """The quoted lines that no printed line matches (a lone ``…`` is any number of lines)."""
    return [s for s in shown if s.strip() != ELIDED and not any(line_matches(s, p) for p in printed)]


def _example_dirs(runs: list[Run]) -> set[str]:
    return {m for r in runs for m in re.findall(r"\bexamples/[\w.-]+", r.command)}


def _run(command: str) -> tuple[int, list[str]]:
    """Run one README command in the current folder: its exit code and every line it printed."""
    argv = shlex.split(command, comments=True)
    if argv[0] == "bnsl":
        for i, arg in enumerate(argv):
            if arg in ("--out", "-o"):
                out = Path(argv[i + 1])
                assert not out.is_absolute() and ".." not in out.parts, f"{command}: --out must stay in the work folder"
        env = {"COLUMNS": "200", "OPENBLAS_NUM_THREADS": "1"}
        env.update({k: None for k in __import__("os").environ if k.startswith("BNSL_")})
        res = CliRunner().invoke(app, argv[1:], env=env, catch_exceptions=False)
        return res.exit_code, res.stdout.splitlines() + res.stderr.splitlines()
    if argv[0] == "head" and len(argv) == 3 and re.fullmatch(r"-\d+", argv[1]):
        return 0, Path(argv[2]).read_text(encoding="utf-8").splitlines()[: int(argv[1][1:])]
    if argv[0] == "cat" and len(argv) == 2:
        return 0, Path(argv[1]).read_text(encoding="utf-8").splitlines()
    pytest.fail(f"README command this test cannot run: {command!r} (only bnsl, head -N FILE and cat FILE)")


def test_the_readme_console_blocks_are_parsed():
    runs = console_runs(README.read_text(encoding="utf-8"))
    bnsl = [r for r in runs if r.command.startswith("bnsl ")]
    subcommands = {r.command.split()[1] for r in bnsl}
    assert {"learn", "show", "privacy-budget", "evaluate"} <= subcommands, subcommands
    learn = " ".join(r.command for r in bnsl if r.command.split()[1] == "learn")
    for option in ("--bootstrap", "--dp", "--knowledge", "--seed"):
        assert option in learn, option
    # every bootstrap and every private run that draws noise is seeded
    for r in bnsl:
        if "--bootstrap" in r.command or ("--dp" in r.command and expected_exit(r.command) is None):
            assert "--seed" in r.command, r.command
    assert all(r.shown for r in bnsl if r.command.split()[1] != "show"), "a command without its output"


def test_a_changed_figure_fails_the_match():
    printed = ["fed-sparse, 37 rounds, 3 edges, polish 3 → 3 edges (+0 −0 ⇄0), 0.007 MB up, 0.006 MB down, 0.24 s",
               "age,dose,0.8692243552929373"]
    assert unmatched(["fed-sparse, 37 rounds, 3 edges, … 0.006 MB down, … s", "…", "age,dose,0.8692243552929373"],
                     printed) == []
    assert unmatched(["fed-sparse, 38 rounds, 3 edges, … s"], printed) == ["fed-sparse, 38 rounds, 3 edges, … s"]
    assert unmatched(["age,dose,0.8692243552929371"], printed) == ["age,dose,0.8692243552929371"]
    assert unmatched(["… 0.006 MB down, … 0.007 MB up"], printed)  # the parts in their order only


def test_every_readme_command_prints_what_the_readme_shows(tmp_path, monkeypatch):
    runs = console_runs(README.read_text(encoding="utf-8"))
    for rel in sorted(_example_dirs(runs)):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    monkeypatch.chdir(tmp_path)
    problems = []
    for r in runs:
        code, printed = _run(r.command)
        want = expected_exit(r.command)
        fails = any(s.startswith("error:") for s in r.shown)
        if want is not None and code != want:
            problems.append(f"README line {r.line}: {r.command}\n  exited {code}, the README says {want}")
        elif want is None and (code != 0) != fails:
            problems.append(f"README line {r.line}: {r.command}\n  exited {code}" + "".join(f"\n  | {p}" for p in printed))
        missing = unmatched(r.shown, printed)
        if missing:
            problems.append(f"README line {r.line}: {r.command}\n  quoted but not printed:"
                            + "".join(f"\n  - {m}" for m in missing)
                            + "\n  printed:" + "".join(f"\n  | {p}" for p in printed))
    assert not problems, "\n".join(problems)
