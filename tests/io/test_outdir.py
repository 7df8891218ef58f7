"""Tests of bnsl_cli.io.outdir: an output folder written as one unit."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from bnsl_cli.io.atomic import atomic_write_text
from bnsl_cli.io.outdir import OutputDir, OutputDirError, abort_pending
from tests._cli import run
from tests._shards import SMALL_COLUMNS, TINY, write_small_shards


def listing(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_text() for p in sorted(d.rglob("*")) if p.is_file()}


def leftovers(parent: Path, name: str) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def test_new_folder_appears_at_once_with_everything(tmp_path):
    od = OutputDir(tmp_path / "deep" / "out", names=["a.txt"], marker="m.json").prepare()
    od.write_text("a.txt", "A")
    od.write_text("sub/b.txt", "B")
    assert not (tmp_path / "deep" / "out").exists()  # nothing visible before commit
    od.write_text("m.json", "{}")
    od.commit()
    assert listing(tmp_path / "deep" / "out") == {"a.txt": "A", "m.json": "{}", "sub/b.txt": "B"}
    assert leftovers(tmp_path / "deep", "out") == []


def test_existing_folder_loses_stale_owned_files_keeps_foreign_ones(tmp_path):
    out = tmp_path / "out"
    (out / "participant-03").mkdir(parents=True)
    (out / "participant-03" / "edges.csv").write_text("old")
    (out / "edges.csv").write_text("old")
    (out / "report.json").write_text("old")
    (out / "notes.txt").write_text("mine")
    owned = ("edges.csv", "report.json", "participant-*/edges.csv")
    od = OutputDir(out, names=["edges.csv", "report.json"], owned=owned, marker="report.json", force=True).prepare()
    od.write_text("edges.csv", "new")
    od.write_text("participant-01/edges.csv", "new1")
    od.write_text("report.json", "new")
    od.commit()
    assert listing(out) == {"edges.csv": "new", "notes.txt": "mine", "participant-01/edges.csv": "new1", "report.json": "new"}
    assert not (out / "participant-03").exists()
    assert leftovers(tmp_path, "out") == []


def test_abort_leaves_the_target_untouched_and_no_staging(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("old")
    od = OutputDir(out, names=["report.json"], owned=("report.json",), marker="report.json", force=True).prepare()
    od.write_text("report.json", "half")
    abort_pending()  # what the CLI does when a command fails or is interrupted
    assert listing(out) == {"report.json": "old"}
    assert leftovers(tmp_path, "out") == []
    fresh = OutputDir(tmp_path / "a" / "b" / "c").prepare()
    fresh.abort()
    assert not (tmp_path / "a").exists()  # parents it made are removed again


def test_lock_refuses_a_second_writer_and_is_released(tmp_path):
    first = OutputDir(tmp_path / "out").prepare()
    with pytest.raises(OutputDirError, match="another bnsl run is writing into this folder"):
        OutputDir(tmp_path / "out").prepare()
    first.commit()
    second = OutputDir(tmp_path / "out").prepare()  # released with the commit; the folder exists now
    with pytest.raises(OutputDirError, match="another bnsl run"):
        OutputDir(tmp_path / "out").prepare()  # the lock of an existing folder lives inside it
    second.abort()
    assert leftovers(tmp_path, "out") == [] and list((tmp_path / "out").iterdir()) == []


def test_preflight_refusals(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(OutputDirError, match="exists and is not a directory"):
        OutputDir(f).prepare()
    with pytest.raises(OutputDirError, match=r"file/sub: cannot write into .*file \(Not a directory\)"):
        OutputDir(f / "sub").prepare()
    out = tmp_path / "out"
    out.mkdir()
    (out / "edges.csv").write_text("precious")
    with pytest.raises(OutputDirError, match="already holds edges.csv that bnsl did not write"):
        OutputDir(out, names=["edges.csv"]).prepare()
    with pytest.raises(OutputDirError, match="is an input"):
        OutputDir(out, names=["edges.csv"], inputs=[out / "edges.csv"], force=True).prepare()
    assert leftovers(tmp_path, "out") == []


@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "existing-folder"])
def test_a_killed_runs_staging_folder_is_removed_by_the_next_prepare(tmp_path, existing):
    """What a run killed outright (SIGKILL) leaves — its staging folder — is removed once the next
    run into the same target holds the lock; other names are kept (tests/cli/test_signals.py: the
    same through a real kill)."""
    out = tmp_path / "out"
    if existing:
        out.mkdir()
        home, prefix = out, ".bnsl-tmp-"
    else:
        home, prefix = tmp_path, ".out.bnsl-tmp-"
    stale = home / f"{prefix}0123abcd"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "half.csv").write_text("half")
    kept = [home / f"{prefix}not-hex", home / ".other.bnsl-tmp-0123abcd"]
    for k in kept:
        k.mkdir()
    od = OutputDir(out, names=["report.json"], marker="report.json").prepare()
    assert not stale.exists() and all(k.is_dir() for k in kept)
    assert od.staging is not None and od.staging.parent == home and od.staging.name.startswith(prefix)
    od.write_text("report.json", "{}")
    od.commit()
    assert (out / "report.json").read_text() == "{}"
    assert sorted(p.name for p in home.iterdir() if ".bnsl-tmp-" in p.name) == sorted(k.name for k in kept)


def test_files_and_folders_honour_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        od = OutputDir(tmp_path / "out").prepare()
        od.write_text("sub/a.txt", "A")
        od.commit()
        atomic_write_text(tmp_path / "single.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "out" / "sub" / "a.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "single.txt").stat().st_mode) == 0o640
    (tmp_path / "single.txt").chmod(0o600)
    atomic_write_text(tmp_path / "single.txt", "y")  # an existing file keeps its mode
    assert stat.S_IMODE((tmp_path / "single.txt").stat().st_mode) == 0o600


# ---------------------------------------------------------------------------------------------
# through the CLI


@pytest.fixture()
def shards(tmp_path) -> Path:
    dst = tmp_path / "shards"
    shutil.copytree(TINY / "shards", dst)
    return dst


@pytest.fixture()
def small_shards(tmp_path) -> Path:
    """Four small shards (3 columns, 30 rows each): every method learns from them at once."""
    return write_small_shards(tmp_path / "small")


def test_failed_run_leaves_the_earlier_output_as_it_was(tmp_path, small_shards):
    shards = small_shards
    out = tmp_path / "run"
    assert run("learn", shards, "--out", out, "-q", "--method", "local-notears").exit_code == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert len([p for p in before if p.name == "adjacency.csv"]) == 4  # one graph per participant
    bad = sorted(shards.glob("*.csv"))[2]
    bad.write_text(bad.read_text() + ",".join(["1"] * (len(SMALL_COLUMNS) - 1) + ["x"]) + "\n")
    res = run("learn", shards, "--out", out, "-q", "--method", "local-notears")
    assert res.exit_code == 3 and bad.name in res.stderr and "Traceback" not in res.output
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]



def test_refit_and_split_rerun_replace_their_earlier_output(tmp_path, shards):
    run_dir = tmp_path / "run"
    assert run("learn", shards, "--out", run_dir, "-q", "--rounds", 3).exit_code == 0
    out = tmp_path / "refit"
    assert run("refit", run_dir, shards, "--out", out, "-q").exit_code == 0
    assert len(list(out.glob("participant-*.csv"))) == 4
    two = sorted(shards.glob("*.csv"))[:2]
    assert run("refit", run_dir, *two, "--out", out, "-q").exit_code == 0
    assert sorted(p.name for p in out.glob("participant-*.csv")) == ["participant-01.csv", "participant-02.csv"]
    assert len(json.loads((out / "summary.json").read_text())["participants"]) == 2


def test_a_folder_never_mixes_two_methods_outputs(tmp_path, small_shards):
    shards = small_shards
    out = tmp_path / "run"
    assert run("learn", shards, "--out", out, "-q", "--rounds", 3).exit_code == 0
    assert (out / "adjacency.csv").exists()
    assert run("learn", shards, "--out", out, "-q", "--method", "local-notears").exit_code == 0
    assert not (out / "adjacency.csv").exists() and not (out / "edges.csv").exists()  # the earlier run's
    assert (out / "participant-01" / "adjacency.csv").exists()
    assert run("learn", shards, "--out", out, "-q", "--rounds", 3).exit_code == 0
    assert not list(out.glob("participant-*")) and (out / "adjacency.csv").exists()
