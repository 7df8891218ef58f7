"""SIGTERM (what kill, Slurm and systemd send) is handled like Ctrl-C: one line, exit 143, no output
and no staging folder or lock left; a run killed outright (SIGKILL) leaves its staging folder, which
the next run into the same --out removes."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests._cli import run
from tests._shards import write_small_shards
from tests.cli.test_bad_input import bnsl_cmd, no_leftovers, subprocess_env


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Shards big enough that a 400-round run is still under way after its first progress line."""
    sim = tmp_path_factory.mktemp("sig") / "sim"
    assert run("simulate", "--nodes", 60, "--edges", 60, "--participants", 4, "--samples", 1000, "--seed", 3,
               "--out", sim, "-q").exit_code == 0
    return sim / "shards"


def _learn_mid_run(shards, out, *extra):
    proc = subprocess.Popen(
        bnsl_cmd("learn", shards, "--out", out, "--rounds", 400, *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(), cwd=out.parent,
        start_new_session=True, text=True,
    )
    first = proc.stderr.readline()  # round 1 is done: the run is under way
    assert first.startswith("round"), first + proc.stderr.read()
    return proc


@pytest.mark.parametrize("to_group", [False, True], ids=["kill-pid", "process-group-with-workers"])
def test_sigterm_mid_learn_is_one_line_exit_143_and_leaves_nothing(tmp_path, big, to_group):
    out = tmp_path / "run"
    proc = _learn_mid_run(big, out, *(["--workers", "2"] if to_group else []))
    assert [p.name for p in tmp_path.iterdir() if ".bnsl-tmp-" in p.name]  # the staging folder exists now
    if to_group:
        os.killpg(proc.pid, signal.SIGTERM)  # Slurm, systemd: every process of the job
    else:
        proc.send_signal(signal.SIGTERM)  # kill PID
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 143, rest
    assert "Traceback" not in rest and "Terminated" not in rest, rest
    errors = [ln for ln in rest.splitlines() if not ln.startswith("round")]
    assert errors == ["error: terminated (SIGTERM); no output was left half-written"], rest
    no_leftovers(tmp_path, "run")


@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "existing-folder"])
def test_a_killed_runs_staging_folder_is_removed_by_the_next_run(tmp_path, big, existing):
    out = tmp_path / "run"
    home = tmp_path
    small = write_small_shards(tmp_path / "small")  # the runs that are not killed: any learn into --out
    if existing:  # staging and lock inside the folder
        assert run("learn", small, "--out", out, "--rounds", 2, "-q").exit_code == 0
        home = out
    proc = _learn_mid_run(big, out)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    stale = [p.name for p in home.iterdir() if ".bnsl-tmp-" in p.name]
    assert len(stale) == 1  # SIGKILL cannot be handled: the staging folder is left
    res = run("learn", small, "--out", out, "--rounds", 2, "-q")
    assert res.exit_code == 0, res.stderr
    assert not [p.name for p in home.iterdir() if ".bnsl-tmp-" in p.name or p.name.endswith(".lock")]
    assert (out / "report.json").exists()
