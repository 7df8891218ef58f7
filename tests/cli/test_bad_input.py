"""The bad-input battery of issue 12 items 10–15: every case checks the one-line error (or the correct
output), the exit code, that there is no traceback, and that no partial output is left behind.

Cases that need a real process (a closed pipe, Ctrl-C, stderr not being a terminal) run
``python -m bnsl_cli`` from this checkout (``PYTHONPATH`` = the repository root).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests._cli import run
from tests._shards import TINY, write_small_shards

ROOT = Path(__file__).resolve().parents[2]


def one_line_error(res, code: int, *fragments: str) -> str:
    """The run failed with ``code`` and exactly one ``error:`` line holding every fragment."""
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.output and "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def no_leftovers(parent: Path, name: str) -> None:
    """No output folder ``name`` and no staging folder or lock of it in ``parent``."""
    assert not (parent / name).exists()
    assert not [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def subprocess_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


def bnsl_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "bnsl_cli", *map(str, args)]


@pytest.fixture()
def small_shards(tmp_path) -> Path:
    """Four small shards (3 columns, 30 rows each): local-notears learns from them at once."""
    return write_small_shards(tmp_path / "small")


def shard_texts(shards: Path) -> list[str]:
    return [p.read_text() for p in sorted(shards.glob("*.csv"))]


# ---------------------------------------------------------------------------------------------
# 10. headers, separators, formats


def test_header_with_fewer_names_than_fields_is_one_line_exit_3(tmp_path, shards):
    p = sorted(shards.glob("*.csv"))[1]
    lines = p.read_text().splitlines()
    p.write_text("\n".join([lines[0]] + [f"{k},{ln}" for k, ln in enumerate(lines[1:])]) + "\n")  # an index column
    res = run("learn", shards, "--out", tmp_path / "run", "-q")
    one_line_error(res, 3, p.name, "line 2", "header (line 1) names 8 columns")
    no_leftovers(tmp_path, "run")


def test_semicolon_file_is_named_with_the_option_to_use(tmp_path, shards):
    # each shard's separator is detected: a ';' shard among ',' shards learns as the ',' ones would
    ref = run("learn", shards, "-q", "--rounds", 10)
    assert ref.exit_code == 0, ref.stderr
    p = sorted(shards.glob("*.csv"))[0]
    p.write_text(p.read_text().replace(",", ";"))
    res = run("learn", shards, "-q", "--rounds", 10)
    assert res.exit_code == 0 and res.stdout == ref.stdout, res.stderr
    # --sep forces one separator on every shard: the ';' shard is then named, with the option to use
    res = run("learn", shards, "--sep", ",", "--out", tmp_path / "run")
    one_line_error(res, 3, p.name, "line 1 (header)", "--sep ';'")
    no_leftovers(tmp_path, "run")


def test_a_shard_whose_separator_cannot_be_told_is_one_line_exit_3(tmp_path, shards):
    p = sorted(shards.glob("*.csv"))[1]
    lines = p.read_text().splitlines()
    # "a,b;c": two fields on ',' and two on ';', one number among them either way
    p.write_text("\n".join("{},{};{}".format(*ln.split(",")[:3]) for ln in lines) + "\n")
    res = run("learn", shards, "--out", tmp_path / "run")
    one_line_error(res, 3, p.name, "cannot tell the field separator", "',' and ';'", "--sep")
    no_leftovers(tmp_path, "run")


def test_sep_and_decimal_the_same_character_is_a_usage_error(tmp_path, shards):
    est = tmp_path / "est.csv"
    est.write_text("source,target,weight\n")
    res = run("refit", est, shards, "--sep", ",", "--decimal", ",", "--out", tmp_path / "run")
    one_line_error(res, 2, "--sep ',' and --decimal , cannot be the same character")
    no_leftovers(tmp_path, "run")


def test_decimal_comma_file_is_named(tmp_path, shards):
    for p in shards.glob("*.csv"):
        p.write_text(p.read_text().replace(",", ";").replace(".", ","))
    res = run("learn", shards, "--sep", ";", "--out", tmp_path / "run")
    one_line_error(res, 3, "row 2", "decimal comma")
    no_leftovers(tmp_path, "run")


def test_sep_tsv_and_gzip_shards_give_the_csv_result(tmp_path, shards):
    ref = run("learn", shards, "-q", "--rounds", 10)
    assert ref.exit_code == 0, ref.stderr
    semi, tsv, gz = (tmp_path / n for n in ("semi", "tsv", "gz"))
    for d in (semi, tsv, gz):
        d.mkdir()
    for p in sorted(shards.glob("*.csv")):
        text = p.read_text()
        (semi / p.name).write_text(text.replace(",", ";"))
        (tsv / (p.stem + ".tsv")).write_text(text.replace(",", "\t"))
        (gz / (p.name + ".gz")).write_bytes(gzip.compress(text.encode()))
    for args in ((semi, "--sep", ";"), (tsv,), (gz,)):
        res = run("learn", *args, "-q", "--rounds", 10)
        assert res.exit_code == 0 and res.stdout == ref.stdout, (args, res.stderr)


# ---------------------------------------------------------------------------------------------
# 11. standard input and output, closed pipes, Ctrl-C


def test_evaluate_reads_the_estimate_from_stdin(tmp_path):
    truth = tmp_path / "truth.csv"
    shutil.copy(TINY / "truth.csv", truth)
    res = run("evaluate", "-", "--truth", truth, "--json", "-q", input=truth.read_bytes())
    assert res.exit_code == 0, res.stderr
    row = json.loads(res.stdout)[0]
    assert row["estimate"] == "-" and row["shd"] == 0 and row["tpr"] == 1.0


def test_learn_reads_a_shard_from_stdin_and_writes_adjacency_to_stdout(tmp_path, shards):
    files = sorted(shards.glob("*.csv"))
    ref = run("learn", *files, "--rounds", 10, "-q", "--adjacency", tmp_path / "adj.csv")
    assert ref.exit_code == 0, ref.stderr
    res = run("learn", "-", *files[1:], "--rounds", 10, "-q", "--adjacency", "-", input=files[0].read_bytes())
    assert res.exit_code == 0, res.stderr
    assert res.stdout == (tmp_path / "adj.csv").read_text()  # the adjacency CSV, nothing else
    assert res.stdout.splitlines()[0].startswith(",")  # names in the header and the first column


def test_two_outputs_on_stdout_is_a_usage_error(tmp_path, shards):
    res = run("learn", shards, "--adjacency", "-", "--edges", "-")
    one_line_error(res, 2, "standard output")
    res = run("learn", shards, "--edges", "-", "--json")
    one_line_error(res, 2, "--edges - and --json")


def test_closed_pipe_ends_quietly(tmp_path, shards):
    proc = subprocess.Popen(
        bnsl_cmd("learn", shards, "--json", "--rounds", 10), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=subprocess_env(), cwd=tmp_path,
    )
    proc.stdout.close()  # the reader goes away before the report is written (| head -0)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert "error" not in err and "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode in (0, 141)


def test_ctrl_c_with_workers_is_one_line_and_leaves_nothing(tmp_path):
    sim = tmp_path / "sim"
    assert run("simulate", "--nodes", 60, "--edges", 60, "--participants", 4, "--samples", 1000, "--seed", 3,
               "--out", sim, "-q").exit_code == 0
    out = tmp_path / "run"
    proc = subprocess.Popen(
        bnsl_cmd("learn", sim / "shards", "--out", out, "--workers", 2, "--rounds", 400),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(), cwd=tmp_path,
        start_new_session=True, text=True,
    )
    first = proc.stderr.readline()  # round 1 is done: the run is under way, workers alive
    assert first.startswith("round"), first
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
    errors = [ln for ln in rest.splitlines() if not ln.startswith("round")]
    assert errors == ["error: interrupted; no output was left half-written"], rest
    no_leftovers(tmp_path, "run")


# ---------------------------------------------------------------------------------------------
# 12. the output folder


def test_unwritable_out_fails_before_computing(tmp_path, shards):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder\n")
    res = run("learn", shards, "--out", blocker / "run")  # its parent cannot be made
    one_line_error(res, 2, str(blocker), "--out")
    assert "round" not in res.stderr  # nothing was computed
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            res = run("learn", shards, "--out", ro / "run")
            one_line_error(res, 2, "--out")
            assert "round" not in res.stderr
        finally:
            ro.chmod(0o755)


def test_stale_per_participant_files_of_an_earlier_run_are_removed(tmp_path, small_shards):
    shards = small_shards
    out = tmp_path / "run"
    assert run("learn", shards, "--method", "local-notears", "--out", out, "-q").exit_code == 0
    assert sorted(p.name for p in out.glob("participant-*")) == [f"participant-0{k}" for k in (1, 2, 3, 4)]
    (out / "notes.txt").write_text("mine\n")  # a file of the user's: kept
    two = sorted(shards.glob("*.csv"))[:2]
    assert run("learn", *two, "--method", "local-notears", "--out", out, "-q").exit_code == 0
    assert sorted(p.name for p in out.glob("participant-*")) == ["participant-01", "participant-02"]
    assert (out / "notes.txt").read_text() == "mine\n"
    no_leftovers_but_out = [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.")]
    assert no_leftovers_but_out == []


def test_a_second_run_into_a_locked_folder_is_refused(tmp_path, shards):
    from bnsl_cli.io.outdir import OutputDir

    out = tmp_path / "run"
    held = OutputDir(out, names=["report.json"]).prepare()  # another run is writing there
    try:
        res = run("learn", shards, "--out", out, "-q")
        one_line_error(res, 2, "another bnsl run is writing into this folder")
        assert not out.exists()
    finally:
        held.abort()
    assert run("learn", shards, "--out", out, "-q", "--rounds", 5).exit_code == 0


# ---------------------------------------------------------------------------------------------
# 13. a column constant in one shard


def test_column_constant_in_one_shard_is_allowed_and_named(tmp_path):
    # three columns: every method learns from them at once; 300 rows a shard: enough for the private run
    shards = write_small_shards(tmp_path / "small", rows=300)
    p = sorted(shards.glob("*.csv"))[1]
    rows = [ln.split(",") for ln in p.read_text().splitlines()]
    col = rows[0][1]
    for r in rows[1:]:
        r[1] = "0.25"
    p.write_text("\n".join(",".join(r) for r in rows) + "\n")
    for method in ("fed-sparse", "fed-bnsl", "notears", "local-notears"):
        out = tmp_path / f"run-{method}"
        res = run("learn", shards, "--method", method, "--out", out, "-q")
        assert res.exit_code == 0, (method, res.stderr)
        warning = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:") and "constant" in ln]
        assert len(warning) == 1 and p.name in warning[0] and repr(col) in warning[0], res.stderr
        assert json.loads((out / "report.json").read_text())
    res = run("learn", "-m", "fed-sparse", "--dp", "--epsilon", 5, shards, "-q", "--rounds", 5, "--seed", 1)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("source,target,weight")


def test_column_constant_in_every_shard_names_the_column(tmp_path, shards):
    for p in shards.glob("*.csv"):
        rows = [ln.split(",") for ln in p.read_text().splitlines()]
        for r in rows[1:]:
            r[2] = "1.5"
        p.write_text("\n".join(",".join(r) for r in rows) + "\n")
    res = run("learn", shards, "--out", tmp_path / "run")
    one_line_error(res, 3, "constant in every shard", "x3")
    no_leftovers(tmp_path, "run")


# ---------------------------------------------------------------------------------------------
# 14. umask, stderr width, --quiet, BNSL_EPSILON, --files-from


def test_outputs_honour_the_umask(tmp_path, shards):
    old = os.umask(0o022)
    try:
        assert run("learn", shards, "--out", tmp_path / "run", "-q", "--rounds", 5,
                   "--adjacency", tmp_path / "adj.csv").exit_code == 0
        assert run("split", TINY / "shards" / "participant-01.csv", "-p", 2, "--out", tmp_path / "sp", "-q").exit_code == 0
    finally:
        os.umask(old)
    for f in [tmp_path / "adj.csv", *(tmp_path / "run").iterdir(), *(tmp_path / "sp").iterdir()]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f
    for d in (tmp_path / "run", tmp_path / "sp"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o755


def test_stderr_is_not_wrapped_at_80_columns_in_a_pipe(tmp_path, shards):
    out = tmp_path / ("a-rather-long-output-folder-name-" * 3 + "end")
    proc = subprocess.run(
        bnsl_cmd("learn", shards, "--out", out, "--rounds", 5), capture_output=True, text=True,
        env=subprocess_env(), cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}/" in proc.stderr.splitlines()  # one line, however long


@pytest.mark.parametrize(
    "args",
    [
        ("simulate", "--nodes", 5, "--edges", 5, "--participants", 2, "--samples", 20, "--seed", 1, "--out", "{tmp}/s"),
        ("split", str(TINY / "shards" / "participant-01.csv"), "-p", 2, "--seed", 0, "--out", "{tmp}/sp"),
        ("evaluate", str(TINY / "truth.csv"), "--truth", str(TINY / "truth.csv"), "--json"),
        ("privacy-budget", "--epsilon", 5, "--samples", 100, "--json"),
    ],
)
def test_quiet_on_every_subcommand(tmp_path, args):
    res = run(*[str(a).replace("{tmp}", str(tmp_path)) for a in args], "--quiet")
    assert res.exit_code == 0, res.output
    assert res.stderr == ""


def test_bnsl_epsilon_in_the_environment_does_not_break_a_non_dp_run(shards):
    res = run("learn", shards, "-q", "--rounds", 5, env={"BNSL_EPSILON": "5", "BNSL_DELTA": "1e-6"})
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("source,target,weight")
    # on the command line it is still a mistake
    one_line_error(run("learn", shards, "--epsilon", 5), 2, "--dp")


def test_files_from_paths_are_relative_to_the_current_directory(tmp_path, shards, monkeypatch):
    lists = tmp_path / "lists"
    lists.mkdir()
    listing = lists / "shards.txt"
    listing.write_text("".join(f"shards/{p.name}\n" for p in sorted(shards.glob("*.csv"))))
    monkeypatch.chdir(tmp_path)
    res = run("learn", "--files-from", listing, "-q", "--rounds", 5)
    assert res.exit_code == 0, res.stderr
    assert res.stdout == run("learn", shards, "-q", "--rounds", 5).stdout


# ---------------------------------------------------------------------------------------------
# 15. local-notears without --out


def test_local_notears_without_out_prints_every_participant(small_shards):
    shards = small_shards
    res = run("learn", shards, "--method", "local-notears", "-q")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "participant,file,source,target,weight"
    files = sorted(shards.glob("*.csv"))
    seen = {}
    for ln in lines[1:]:
        k, f, s, t, w = ln.split(",")
        seen.setdefault(int(k), f)
        assert s != t and np.isfinite(float(w))
    assert seen == {k + 1: str(f) for k, f in enumerate(files)}


# ---------------------------------------------------------------------------------------------
# the reader's hash reaches the report (issue 13.6: self-describing output folders)


def test_report_holds_the_sha256_of_every_input_file(tmp_path, shards):
    import hashlib

    out = tmp_path / "run"
    assert run("learn", shards, "--out", out, "-q", "--rounds", 3).exit_code == 0
    report = json.loads((out / "report.json").read_text())
    want = [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(shards.glob("*.csv"))]
    assert [p["sha256"] for p in report["data"]["participants"]] == want
