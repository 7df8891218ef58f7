"""`bnsl simulate` driven through the real Typer app (and once as a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.simulate import simulate
from tests._cli import run


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("sim")
    args = ["--nodes", 20, "--edges", 20, "--participants", 8, "--samples", 5000, "--seed", 1]
    r1 = run("simulate", *args, "--out", base / "d")
    r2 = run("simulate", *args, "--out", base / "again")
    return base, r1, r2


def test_paper_setting_writes_shards_and_an_acyclic_truth(paper_run):
    base, r1, _ = paper_run
    assert r1.exit_code == 0, r1.output
    out = base / "d"
    shards = sorted((out / "shards").glob("*.csv"))
    assert [p.name for p in shards] == [f"participant-{k:02d}.csv" for k in range(1, 9)]
    names = tuple(f"x{k:02d}" for k in range(1, 21))
    for p in shards:
        t = read_table(p)
        assert t.n == 5000 and t.names == names
    truth = read_graph(out / "truth.csv")
    assert truth.names == names
    assert nx.is_directed_acyclic_graph(nx.DiGraph(truth.W != 0))
    manifest = json.loads((out / "manifest.json").read_text())
    n_edges = int(np.count_nonzero(truth.W))
    assert manifest["truth"]["edges"] == n_edges
    assert 8 <= n_edges <= 32  # ER with 20 expected edges (sd about 4.2)
    dot = read_graph(out / "truth.dot")
    np.testing.assert_array_equal(dot.reorder(names).W, truth.W)
    # the summary goes to stderr, nothing to stdout without --json
    assert r1.stdout == ""
    assert "20 nodes" in r1.stderr and f"{n_edges} edges" in r1.stderr


def test_files_hold_exactly_the_library_output(paper_run):
    base, _, _ = paper_run
    lib = simulate(20, 20, participants=8, samples=5000, seed=1)
    np.testing.assert_array_equal(read_graph(base / "d" / "truth.csv").W, lib.W)
    np.testing.assert_array_equal(read_table(base / "d" / "shards" / "participant-08.csv").X, lib.shards[7])


def test_same_seed_gives_byte_identical_files(paper_run):
    base, r1, r2 = paper_run
    assert r2.exit_code == 0, r2.output
    a, b = tree_bytes(base / "d"), tree_bytes(base / "again")
    assert set(a) == set(b) and len(a) == 11
    assert all(a[k] == b[k] for k in a)


def test_manifest_records_options_files_and_orientation(paper_run):
    base, _, _ = paper_run
    m = json.loads((base / "d" / "manifest.json").read_text())
    assert m["schema_version"] == 1 and m["seed"] == 1 and m["seed_given"] is True
    assert m["options"]["nodes"] == 20 and m["options"]["participants"] == 8
    assert m["options"]["weight_range"] == [0.5, 2.0] and m["options"]["noise"] == "gaussian"
    assert "i -> j" in m["orientation"]
    rows = {f["path"]: f.get("rows") for f in m["files"]}
    assert rows["shards/participant-03.csv"] == 5000 and rows["truth.csv"] == 20
    assert "bnsl_version" in m


def test_different_seed_changes_data(tmp_path):
    common = ["--nodes", 6, "--edges", 6, "--participants", 2, "--samples", 30]
    assert run("simulate", *common, "--seed", 1, "--out", tmp_path / "a").exit_code == 0
    assert run("simulate", *common, "--seed", 2, "--out", tmp_path / "b").exit_code == 0
    a = (tmp_path / "a" / "shards" / "participant-01.csv").read_bytes()
    b = (tmp_path / "b" / "shards" / "participant-01.csv").read_bytes()
    assert a != b


def test_single_participant_heterogeneous_and_json(tmp_path):
    out = tmp_path / "one"
    r = run("simulate", "--nodes", 12, "--edges", 15, "--participants", 1, "--samples", 40, "--seed", 3,
            "--out", out, "--json", "--graph", "sf", "--noise", "uniform", "--heterogeneous")
    assert r.exit_code == 0, r.output
    assert (out / "data.csv").exists() and not (out / "shards").exists()
    assert read_table(out / "data.csv").names[0] == "x01"
    printed = json.loads(r.stdout)
    assert printed == json.loads((out / "manifest.json").read_text())
    assert printed["options"]["graph"] == "sf" and printed["options"]["heterogeneous"] is True
    assert (out / "truths" / "participant-01.csv").exists()


def test_heterogeneous_truths_share_support_and_signs(tmp_path):
    out = tmp_path / "het"
    r = run("simulate", "--nodes", 10, "--edges", 15, "--participants", 3, "--samples", 20, "--seed", 4,
            "--out", out, "--heterogeneous", "--spread", "0.4")
    assert r.exit_code == 0, r.output
    W = read_graph(out / "truth.csv").W
    truths = [read_graph(p).W for p in sorted((out / "truths").glob("*.csv"))]
    assert len(truths) == 3
    for Wp in truths:
        np.testing.assert_array_equal(np.sign(Wp), np.sign(W))
        assert np.abs(Wp[W != 0]).min() >= 0.5
    assert not np.array_equal(truths[0], truths[1])


def test_rerun_into_own_output_replaces_it_and_removes_stale_shards(tmp_path):
    out = tmp_path / "d"
    assert run("simulate", "--nodes", 5, "--edges", 4, "--participants", 4, "--samples", 10, "--seed", 0,
               "--out", out).exit_code == 0
    r = run("simulate", "--nodes", 5, "--edges", 4, "--participants", 2, "--samples", 10, "--seed", 0, "--out", out)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["participant-01.csv", "participant-02.csv"]


def test_refuses_foreign_non_empty_directory_unless_forced(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    args = ["--nodes", 5, "--edges", 4, "--participants", 2, "--samples", 10, "--seed", 0, "--out", out]
    r = run("simulate", *args)
    assert r.exit_code == 2
    assert "not empty" in r.stderr and "--force" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    r = run("simulate", *args, "--force")
    assert r.exit_code == 0, r.output
    assert (out / "notes.txt").read_text() == "keep me" and (out / "truth.csv").exists()


@pytest.mark.parametrize(
    "opts, fragment",
    [
        (["--nodes", 5, "--edges", 11], "at most"),
        (["--nodes", 1, "--edges", 0], "nodes"),
        (["--nodes", 5, "--edges", 4, "--samples", 1], "samples"),
        (["--nodes", 5, "--edges", 4, "--weight-range", "2,1"], "weight-range"),
        (["--nodes", 5, "--edges", 4, "--weight-range", "abc"], "weight-range"),
        (["--nodes", 5, "--edges", 4, "--noise-scale", "0"], "--noise-scale"),
        (["--nodes", 5, "--edges", 4, "--participants", 0], "participants"),
        (["--nodes", 5, "--edges", 4, "--seed", -1], "seed"),
    ],
)
def test_bad_options_exit_2_without_creating_anything(tmp_path, opts, fragment):
    base = {"--participants": 2, "--samples": 10}
    args = list(opts)
    for k, v in base.items():
        if k not in args:
            args += [k, v]
    out = tmp_path / "never"
    r = run("simulate", *args, "--out", out)
    assert r.exit_code == 2, r.output
    assert fragment in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_subprocess_error_is_one_line_without_traceback(tmp_path):
    out = tmp_path / "never"
    proc = subprocess.run(
        [sys.executable, "-m", "bnsl_cli", "simulate", "--nodes", "4", "--edges", "7", "--participants", "2",
         "--samples", "10", "--out", str(out)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not out.exists()


# Recorded with the code before --noise-scale LOW,HIGH and --column-scale existed (numpy 2.x
# Generator streams); a single --noise-scale value must keep producing exactly these files.
GOLDEN = {
    ("a", "shards/participant-01.csv"): "d05cc3cea3cce8b51480f6460b892f63455e55e1e121d4fab6a5209232be4f95",
    ("a", "shards/participant-02.csv"): "b1a4238fff8ebeabcaea6967cc0a65d45408daba368a711c534089cb451f5776",
    ("a", "truth.csv"): "fba3a4229c0c2271a8cc617b3df2540952f1d127ab9c09308977ddd26319ee50",
    # truth.dot: the DOT layout of issue 21 (node names as ids, the weight under `weight`); same graph
    ("a", "truth.dot"): "543e3080b6d4aa3218d4ca06158e36f148ce53d9bc4a8a6369ddc3e9fca04118",
    ("b", "data.csv"): "f0f977d523580e84d161368b1d60c5f073df80c16cd34d2f04c7ee1873943d54",
    ("b", "truth.csv"): "d0e9a8224aea23b413ebf3352e29084fc3376a5941dc89a082eacbdc6f0cf589",
    ("b", "truth.dot"): "a913f5a2c32bbc8146155891592576b81f747e5792bda2994a1617d20a913a9d",
}


def test_single_noise_scale_is_byte_identical_to_before(tmp_path):
    import hashlib

    assert run("simulate", "-d", 6, "-e", 6, "-p", 2, "-n", 5, "--seed", 7, "--out", tmp_path / "a").exit_code == 0
    assert run("simulate", "-d", 5, "-e", 5, "--graph", "sf", "-p", 1, "-n", 4, "--seed", 3, "--noise-scale", "0.5",
               "--out", tmp_path / "b").exit_code == 0
    for (run_dir, rel), digest in GOLDEN.items():
        assert hashlib.sha256((tmp_path / run_dir / rel).read_bytes()).hexdigest() == digest, rel
    for run_dir in ("a", "b"):
        manifest = json.loads((tmp_path / run_dir / "manifest.json").read_text())
        assert isinstance(manifest["options"]["noise_scale"], float)
        assert "noise_sds" not in manifest["options"] and "column_scale" not in manifest["options"]
        assert not (tmp_path / run_dir / "truth-scaled.csv").exists()


def test_noise_range_and_column_scale_are_recorded_and_truth_scaled_written(tmp_path):
    out = tmp_path / "s"
    r = run("simulate", "-d", 6, "-e", 8, "-p", 2, "-n", 200, "--seed", 3, "--noise-scale", "0.5,2",
            "--column-scale", "1e-3,1e6", "--weight-range", "0.2,1", "--out", out)
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    opts = m["options"]
    assert opts["noise_scale"] == [0.5, 2.0] and len(opts["noise_sds"]) == 6
    assert opts["column_scale"] == [0.001, 1e6] and len(opts["column_factors"]) == 6
    assert opts["weight_range"] == [0.2, 1.0]
    assert "truth-scaled.csv" in {f["path"] for f in m["files"]}
    truth, scaled = read_graph(out / "truth.csv"), read_graph(out / "truth-scaled.csv")
    s = np.array(opts["column_factors"])
    assert np.array_equal(truth.W != 0, scaled.W != 0)
    assert np.allclose(scaled.W, truth.W * s[None, :] / s[:, None])
    X = read_table(out / "shards" / "participant-01.csv").X
    assert np.all(np.abs(X).max(axis=0) / s < 50)  # columns carry their factor
    # a rerun without --column-scale removes the stale truth-scaled.csv
    assert run("simulate", "-d", 6, "-e", 8, "-p", 2, "-n", 200, "--seed", 3, "--out", out).exit_code == 0
    assert not (out / "truth-scaled.csv").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--noise-scale", "2,1"], "--noise-scale"),
        (["--noise-scale", "a,b"], "--noise-scale"),
        (["--noise-scale", "-1"], "--noise-scale"),
        (["--column-scale", "1"], "--column-scale"),
        (["--column-scale", "0,5"], "--column-scale"),
    ],
)
def test_bad_scale_options_are_usage_errors(tmp_path, args, needle):
    r = run("simulate", "-d", 5, "-e", 4, "-p", 1, "-n", 10, *args, "--out", tmp_path / "x")
    assert r.exit_code == 2
    assert needle in r.output and "Traceback" not in r.output
    assert not (tmp_path / "x").exists()
