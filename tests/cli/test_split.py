"""`bnsl split` driven through the real Typer app (and as a subprocess for the error path)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._cli import run

SACHS = Path(__file__).resolve().parents[2] / "examples" / "sachs" / "sachs.csv"


def data_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()[1:]


@pytest.fixture()
def sachs(tmp_path) -> Path:
    dst = tmp_path / "sachs.csv"
    shutil.copyfile(SACHS, dst)
    return dst


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sachs_into_three_shards_loses_and_duplicates_nothing(sachs, tmp_path):
    before = digest(sachs)
    out = tmp_path / "shards"
    r = run("split", sachs, "--participants", 3, "--seed", 0, "--out", out)
    assert r.exit_code == 0, r.output
    files = sorted(out.glob("*.csv"))
    assert [f.name for f in files] == ["participant-01.csv", "participant-02.csv", "participant-03.csv"]
    header = sachs.read_text().splitlines()[0]
    assert all(f.read_text().splitlines()[0] == header for f in files)
    counts = [len(data_lines(f)) for f in files]
    assert sum(counts) == 7466 and max(counts) - min(counts) <= 1
    shard_rows = sorted(line for f in files for line in data_lines(f))
    assert shard_rows == sorted(data_lines(sachs))  # same multiset of rows, values byte-identical
    assert digest(sachs) == before
    # the table of shard sizes goes to stderr
    assert r.stdout == "" and "2489" in r.stderr


def test_same_seed_same_bytes_other_seed_other_split(sachs, tmp_path):
    for name, seed in [("a", 0), ("b", 0), ("c", 1)]:
        assert run("split", sachs, "-p", 3, "--seed", seed, "--out", tmp_path / name).exit_code == 0
    f = "participant-02.csv"
    assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert (tmp_path / "a" / f).read_bytes() != (tmp_path / "c" / f).read_bytes()


def test_contiguous_blocks_in_file_order(sachs, tmp_path):
    out = tmp_path / "c"
    assert run("split", sachs, "-p", 4, "--mode", "contiguous", "--out", out).exit_code == 0
    joined = [line for f in sorted(out.glob("*.csv")) for line in data_lines(f)]
    assert joined == data_lines(sachs)


def test_sizes_json_output(sachs, tmp_path):
    out = tmp_path / "s"
    r = run("split", sachs, "--sizes", "0.5,0.3,0.2", "--seed", 2, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["mode"] == "sizes" and summary["participants"] == 3 and summary["rows"] == 7466
    assert [s["rows"] for s in summary["shards"]] == [3733, 2240, 1493]
    assert [len(data_lines(out / s["path"])) for s in summary["shards"]] == [3733, 2240, 1493]


def test_group_mode_one_shard_per_value_column_dropped(tmp_path):
    src = tmp_path / "g.csv"
    src.write_text("a,site,b\n1,10,2\n3,9,4\n5,10,6\n7,9,8.5\n9,2,1\n11,2,5\n")
    out = tmp_path / "g"
    r = run("split", src, "--by", "site", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert [(s["group"], s["rows"]) for s in summary["shards"]] == [("2", 2), ("9", 2), ("10", 2)]
    assert (out / "participant-02.csv").read_text() == "a,b\n3,4\n7,8.5\n"
    r = run("split", src, "--by", "site", "--participants", 2, "--out", tmp_path / "bad")
    assert r.exit_code == 3 and "distinct" in r.stderr
    assert not (tmp_path / "bad").exists()


def test_refuses_non_empty_directory_unless_forced_and_removes_stale_shards(sachs, tmp_path):
    out = tmp_path / "o"
    assert run("split", sachs, "-p", 5, "--seed", 0, "--out", out).exit_code == 0
    r = run("split", sachs, "-p", 3, "--seed", 0, "--out", out)
    assert r.exit_code == 2 and "--force" in r.stderr
    assert len(list(out.glob("*.csv"))) == 5
    r = run("split", sachs, "-p", 3, "--seed", 0, "--out", out, "--force")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.glob("*.csv")) == [f"participant-0{k}.csv" for k in (1, 2, 3)]


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("a,b\n1,2\n3,oops\n4,5\n", "not a number"),
        ("a,b\n1,2\n3\n4,5\n", "fields"),
        ("", "empty"),
    ],
)
def test_bad_input_exits_3_one_line_no_output(tmp_path, content, fragment):
    src = tmp_path / "bad.csv"
    src.write_text(content)
    out = tmp_path / "never"
    proc = subprocess.run(
        [sys.executable, "-m", "bnsl_cli", "split", str(src), "--participants", "2", "--out", str(out)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


def test_missing_file_and_too_many_participants_exit_3(tmp_path, sachs):
    r = run("split", tmp_path / "nope.csv", "-p", 2, "--out", tmp_path / "x")
    assert r.exit_code == 3 and "not found" in r.stderr
    small = tmp_path / "small.csv"
    small.write_text("a,b\n1,2\n3,4\n")
    r = run("split", small, "-p", 3, "--out", tmp_path / "y")
    assert r.exit_code == 3 and "non-empty" in r.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@pytest.mark.parametrize(
    "opts, fragment",
    [
        (["--mode", "random"], "--participants"),
        (["-p", 3, "--sizes", "0.5,0.4"], "sum to 1"),
        (["-p", 2, "--sizes", "0.5,0.3,0.2"], "--participants"),
        (["--sizes", "0.5,0.5", "--mode", "contiguous"], "implies"),
        (["--mode", "group"], "--by"),
        (["-p", 2, "--seed", -3], "--seed"),
    ],
)
def test_bad_options_exit_2(sachs, tmp_path, opts, fragment):
    out = tmp_path / "never"
    r = run("split", sachs, *opts, "--out", out)
    assert r.exit_code == 2, r.output
    assert fragment in r.stderr
    assert not out.exists()


def test_refuses_to_overwrite_the_input(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    src = d / "participant-01.csv"
    src.write_text("a,b\n1,2\n3,4\n5,6\n")
    before = src.read_bytes()
    r = run("split", src, "-p", 2, "--out", d, "--force")
    assert r.exit_code == 2 and "overwrite the input" in r.stderr
    assert src.read_bytes() == before


def test_by_writes_a_manifest_of_group_to_file(tmp_path):
    src = tmp_path / "g.csv"
    src.write_text("a,site,b\n1,north,2\n3,south,4\n5,north,6\n7,south,8.5\n9,east,1\n11,east,3\n")
    out = tmp_path / "g"
    assert run("split", src, "--by", "site", "--out", out, "-q").exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["groups"] == {"east": "participant-01.csv", "north": "participant-02.csv", "south": "participant-03.csv"}
    assert manifest["by"] == "site" and manifest["input"] == str(src)
    for group, name in manifest["groups"].items():
        rows = (out / name).read_text().splitlines()[1:]
        want = [ln for ln in src.read_text().splitlines()[1:] if ln.split(",")[1] == group]
        assert rows == [",".join(c for k, c in enumerate(w.split(",")) if k != 1) for w in want]
    # the shards are the learner's input: the manifest is not a *.csv shard
    assert sorted(p.name for p in out.glob("*.csv")) == sorted(manifest["groups"].values())


def test_quiet_and_tab_separated_input(tmp_path):
    src = tmp_path / "d.tsv"
    src.write_text("a\tb\n1\t2\n3\t4.5\n5\t6\n7\t8\n")
    out = tmp_path / "o"
    r = run("split", src, "-p", 2, "--mode", "contiguous", "--out", out, "-q")
    assert r.exit_code == 0 and r.stderr == ""
    assert (out / "participant-01.csv").read_text() == "a,b\n1,2\n3,4.5\n"  # comma-separated shards


def test_split_reads_standard_input(tmp_path):
    text = "a,b\n1,2\n3,4.5\n5,6\n7,8\n"
    r = run("split", "-", "-p", "2", "--mode", "contiguous", "--out", tmp_path / "o", "-q", input=text)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "participant-02.csv").read_text() == "a,b\n5,6\n7,8\n"
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["input"] == "-"
