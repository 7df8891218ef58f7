"""The benchmark cell machinery (benchmarks/_cells.py, accuracy_grid.py): print → run → collect."""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def cells_mod():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("_cells"), importlib.import_module("accuracy_grid")
    finally:
        sys.path.remove(str(BENCH))


def tiny(cells, method="notears", seed=3, extra=()):
    sim = ("--nodes", "4", "--edges", "3", "--participants", "2", "--samples", "200", "--seed", str(seed))
    return cells.Cell(f"tiny/s{seed}/{method}", {"method": method, "seed": seed, "d": 4},
                      sim, ("--method", method, "--seed", str(seed), *extra))


def test_print_run_skip_and_collect_one_tiny_cell(tmp_path, cells_mod):
    cells, _ = cells_mod
    cell = tiny(cells)
    line = cells.shell_line(cell, tmp_path, cells.default_bnsl())
    assert "\n" not in line and " simulate " in line and " learn " in line and " evaluate " in line
    assert cells.run_lines([line]) == [0]
    folder = tmp_path / cell.id
    ev = json.loads((folder / "evaluation.json").read_text())
    assert ev[0]["shd"] is not None and "shd_cpdag" in ev[0]
    assert json.loads((folder / "cell.json").read_text())["id"] == cell.id
    assert not (folder / "data" / "shards").exists()  # regenerable from the manifest's seed
    manifest = json.loads((folder / "data" / "manifest.json").read_text())
    assert manifest["seed"] == 3 and manifest["bnsl_version"]
    # the recorded sha256 are those of what bnsl simulate writes for this seed
    sums = dict(reversed(ln.split()) for ln in (folder / "inputs.sha256").read_text().splitlines())
    assert set(sums) == {"truth.csv", "shards/participant-01.csv", "shards/participant-02.csv"}
    assert sums["truth.csv"] == hashlib.sha256((folder / "data" / "truth.csv").read_bytes()).hexdigest()
    assert cells.is_complete(cell, tmp_path)

    # a rerun of a complete folder does nothing
    stamp = (folder / "evaluation.json").stat().st_mtime_ns
    assert cells.run_lines([line]) == [0]
    assert (folder / "evaluation.json").stat().st_mtime_ns == stamp

    rows, incomplete = cells.collect(tmp_path)
    assert incomplete == [] and len(rows) == 1
    row = rows[0]
    assert row["cell"] == cell.id and row["shd"] == ev[0]["shd"] and row["method"] == "notears"
    assert row["seconds"] is not None and row["bnsl_version"] and row["inputs_sha256"]

    # a changed command reruns the folder
    changed = cells.Cell(cell.id, cell.params, cell.simulate, (*cell.learn, "--threshold", "0.25"))
    assert not cells.is_complete(changed, tmp_path)


def test_a_failing_cell_leaves_no_result_and_is_listed(tmp_path, cells_mod):
    cells, _ = cells_mod
    bad = tiny(cells, method="no-such-method")
    line = cells.shell_line(bad, tmp_path, cells.default_bnsl())
    assert cells.run_lines([line]) != [0]
    folder = tmp_path / bad.id
    assert not (folder / "evaluation.json").exists() and (folder / "failed").read_text().startswith("exit ")
    assert "no-such-method" in (folder / "log.txt").read_text()
    rows, incomplete = cells.collect(tmp_path)
    assert rows == [] and incomplete == [bad.id]


def test_grid_print_commands_and_collect_table(tmp_path, cells_mod):
    cells, grid = cells_mod
    quick = grid.quick_cells()
    ids = [c.id for c in quick]
    assert len(ids) == len(set(ids))
    assert all(c.params["d"] <= 50 and c.params["seed"] in (1, 2, 3) for c in quick)
    assert all(int(c.simulate[c.simulate.index("--samples") + 1]) * c.params["P"] == 40_000 for c in quick)
    scaled = [c for c in quick if c.params.get("variant") == "cs-std"]
    assert scaled and all("--column-scale" in c.simulate and "--standardize" in c.learn for c in scaled)
    assert all(c.id.replace("-cs-std", "-std") in ids for c in scaled)  # each has its unscaled twin
    out = subprocess.run(
        [sys.executable, str(BENCH / "accuracy_grid.py"), "--quick", "--print-commands", "--out", str(tmp_path),
         "--only", "ER2/d20/eq-def/P8/s1/*"],
        capture_output=True, text=True, check=True,
    )
    lines = out.stdout.splitlines()
    assert lines and all("ER2/d20/eq-def/P8/s1/" in ln for ln in lines)
    assert any("--dp --epsilon 10" in ln for ln in lines)

    # collect two tiny cells (pooled and fed-sparse, same data) into the table and its targets
    pooled, fed = tiny(cells, "notears"), tiny(cells, "fed-sparse")
    for c in (pooled, fed):
        c.params.update(graph="T", noise="eq", weights="def", P=2, epsilon=None)
    codes = cells.run_lines([cells.shell_line(c, tmp_path, cells.default_bnsl()) for c in (pooled, fed)], jobs=2)
    assert codes == [0, 0]
    res = subprocess.run(
        [sys.executable, str(BENCH / "accuracy_grid.py"), "--collect", str(tmp_path),
         "--results-md", str(tmp_path / "RESULTS.md")],
        capture_output=True, text=True, check=True,
    )
    assert "| T | 4 | eq | def | 2 | fed-sparse |" in res.stdout
    assert "1.25×pooled+2" in res.stdout  # the target is checked against the pooled group
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.count("## Accuracy grid") == 1 and (tmp_path / "accuracy_grid.csv").is_file()
