"""The benchmark cell machinery (benchmarks/_cells.py, accuracy_grid.py): print → run → collect."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from tests._bench import BENCH, bench_modules


@pytest.fixture(scope="module")
def cells_mod():
    with bench_modules("_cells", "accuracy_grid") as mods:
        yield mods


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


@pytest.mark.slow  # the print/run/collect cycle is covered fast by test_print_run_skip_and_collect_one_tiny_cell
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


# ---------------------------------------------------------------------------------------------
# the acyclicity twins of the grid (issue 13: logdet as the default?)


def test_grid_acyclicity_twins_of_every_fed_sparse_cell(cells_mod):
    _, grid = cells_mod
    quick = grid.quick_cells()
    twins = grid.h_twins(quick, ("expm", "logdet"))
    base = [c for c in quick if c.params["method"] == "fed-sparse" and not c.params.get("variant")]
    assert base and any(c.params["epsilon"] is not None for c in base)  # DP cells too
    assert len(twins) == len(quick) + 2 * len(base)
    ids = {c.id: c for c in twins}
    for c in base:
        for f in ("expm", "logdet"):
            t = ids[c.id + "-" + f]
            assert t.params["variant"] == f and t.simulate == c.simulate
            assert list(t.learn) == [*c.learn, "--acyclicity", f]
    # no other method gets a twin (they have no choice of h)
    assert all(c.params["method"] == "fed-sparse" for c in twins if c.params.get("variant") in ("expm", "logdet"))
    bad = subprocess.run([sys.executable, str(BENCH / "accuracy_grid.py"), "--quick", "--acyclicity", "nope",
                          "--print-commands"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--acyclicity" in bad.stderr


def test_grid_targets_of_the_twins_use_pooled_and_their_own_non_private_run(cells_mod):
    _, grid = cells_mod

    def group(method, eps, variant, shd):
        return dict(graph="G", d=20, noise="eq", weights="def", P=8, method=method, epsilon=eps, variant=variant,
                    seeds=[1, 2], shd=shd, skeleton_recall=[1.0, 1.0], cells=[f"{method}{eps}{variant}{s}" for s in (1, 2)])

    groups = [group("notears", None, "", [4, 4]), group("fed-sparse", None, "logdet", [6, 8]),
              group("fed-sparse", None, "expm", [0, 0]), group("fed-sparse", 10.0, "logdet", [16, 18]),
              group("fed-sparse", 10.0, "expm", [4, 4])]
    t = grid.targets(groups, {})
    # non-private: 1.25 × 4 + 2 = 7 → logdet (mean 7) met, expm met
    assert t["G/d20/eq-def/P8/s*/fed-sparse-logdet"][0] and t["G/d20/eq-def/P8/s*/fed-sparse-expm"][0]
    # DP ε = 10 against the non-private run of the same function: logdet 17 ≤ 2 × 7 + 3; expm 4 > 2 × 0 + 3
    assert t["G/d20/eq-def/P8/s*/fed-sparse-dp10-logdet"][0]
    assert not t["G/d20/eq-def/P8/s*/fed-sparse-dp10-expm"][0]


# ---------------------------------------------------------------------------------------------
# bench_learn.py on a cluster: --print-commands → run the lines → --collect


@pytest.fixture(scope="module")
def bench_mod():
    with bench_modules("bench_learn") as (mod,):
        yield mod


#: the options of bench_learn.py for a grid of one tiny cell
TINY_GRID = ["--dims", "6", "--seeds", "1", "--participants", "2", "--samples", "300"]


@pytest.mark.slow  # the print/run/collect cycle is covered fast by test_print_run_skip_and_collect_one_tiny_cell
def test_bench_learn_print_run_collect_matches_a_direct_run(tmp_path, cells_mod, bench_mod):
    cells, _ = cells_mod
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_learn.py"), *TINY_GRID, "--acyclicity", "expm,logdet", "--print-commands",
         "--out", str(tmp_path), "--bnsl", cells.default_bnsl()],
        capture_output=True, text=True, check=True,
    )
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all("\n" not in ln for ln in lines)
    assert cells.run_lines(lines, jobs=2) == [0, 0]
    folder = tmp_path / "d6" / "s0" / "fed-sparse-logdet"
    res = json.loads((folder / "resources.json").read_text())
    assert res["exit"] == 0 and res["peak_rss_kb"] > 10_000 and res["wall_s"] > 0
    report = json.loads((folder / "run" / "report.json").read_text())
    assert report["options"]["acyclicity"] == "logdet"

    rows, incomplete = bench_mod.collect_rows(tmp_path)
    assert incomplete == [] and len(rows) == 2
    by = {r["method"]: r for r in rows}
    assert set(by) == {"fed-sparse acyclicity=expm", "fed-sparse acyclicity=logdet"}
    # the cell ran the same data and options as a direct run: same rounds, h evaluations, bytes, SHD
    from _harness import run_one

    for f in ("expm", "logdet"):
        direct = run_one(6, 0, "fed-sparse", participants=2, samples=300, coord={"acyclicity": f})
        cell = by[f"fed-sparse acyclicity={f}"]
        for key in ("rounds", "h_evals", "shd", "total_mb"):
            assert cell[key] == direct[key], (f, key)
        assert cell["time_s"] >= cell["learn_s"] > 0 and cell["peak_mb"] > 10

    table = subprocess.run([sys.executable, str(BENCH / "bench_learn.py"), "--collect", str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout
    assert "fed-sparse acyclicity=logdet" in table and "h_evals" in table and "peak_mb" in table
    assert "acyclicity=logdet / fed-sparse acyclicity=expm" in table  # the side-by-side ratio

    # a rerun of complete folders does nothing
    stamp = (folder / "resources.json").stat().st_mtime_ns
    assert cells.run_lines(lines) == [0, 0]
    assert (folder / "resources.json").stat().st_mtime_ns == stamp


def test_bench_learn_print_commands_options(tmp_path, bench_mod):
    run = lambda *a: subprocess.run([sys.executable, str(BENCH / "bench_learn.py"), *TINY_GRID, "--print-commands",  # noqa: E731
                                     "--out", str(tmp_path), *a], capture_output=True, text=True)
    r = run("--methods", "fed-sparse-plain,fed-bnsl", "--dp", "--epsilon", "5", "--acyclicity", "expm,logdet")
    assert r.returncode == 0
    ids = sorted(ln.split("D=", 1)[1].split(";", 1)[0].rsplit("/", 3)[-3:][2] for ln in r.stdout.splitlines())
    assert "fed-sparse-plain-logdet" in ids and "fed-bnsl-expm" in ids and "fed-bnsl-logdet" not in ids
    assert "fed-sparse-logdet-dp5" in ids and "fed-bnsl-expm-dp5" in ids
    assert "skipped" in r.stderr and "fed-bnsl" in r.stderr
    plain = [ln for ln in r.stdout.splitlines() if "fed-sparse-plain-logdet;" in ln or "fed-sparse-plain-logdet'" in ln]
    assert plain and "--no-polish" in plain[0] and "--acyclicity logdet" in plain[0]
    dp = [ln for ln in r.stdout.splitlines() if "fed-sparse-logdet-dp5" in ln][0]
    assert "--dp --epsilon 5" in dp and "--seed 10000" in dp  # DP runs use the harness's learn seed
    for bad in (("--screen", "0,0.01"), ("--read",)):
        r = run(*bad)
        assert r.returncode == 2 and r.stdout == ""


def test_bench_learn_markdown_rows_follow_the_results_table(bench_mod):
    row = dict(d=200, method="fed-sparse acyclicity=logdet", seeds=2, time_s=11.44, peak_mb=226.6, participants_s=4.9,
               coordinator_s=6.04, polish_s=0.14, rounds=64.0, h_evals=5148.0, total_mb=12.345, shd=0.5, tpr=0.9975)
    other = dict(row, d=20, method="fed-sparse acyclicity=expm dp ε=10")
    text = bench_mod.markdown_rows([row, other], "0.6–0.7", "05:55 UTC").splitlines()
    assert text[0].startswith("| 20 | expm (dp ε=10) | 2 | 11.44 | 227 |")
    cells = [c.strip() for c in text[1].split("|")[1:-1]]
    assert cells[:14] == ["200", "logdet", "2", "11.44", "227", "4.90", "6.04", "0.14", "64.0", "5148", "12.35", "0.50",
                          "0.998", "0.6–0.7"]
    assert cells[14].endswith("05:55 UTC") and len(cells) == 15
    header = next(ln for ln in (BENCH / "RESULTS.md").read_text().splitlines() if ln.startswith("| d | h | seeds |"))
    assert len(header.split("|")) - 2 == len(cells)  # same columns as the RESULTS.md table


def test_grid_acyclicity_comparison_rules(cells_mod):
    _, grid = cells_mod

    def group(variant, shd, eps=None, graph="G"):
        return dict(graph=graph, d=20, noise="eq", weights="def", P=8, method="fed-sparse", epsilon=eps,
                    variant=variant, seeds=list(range(1, len(shd) + 1)), shd=shd)

    groups = [group("expm", [15, 0, 13, 0, 0]), group("logdet", [23, 0, 13, 0, 0]),  # one seed: mean δ = se
              group("expm", [26, 31, 35], 1.0), group("logdet", [33, 38, 40], 1.0),  # every seed worse
              group("expm", [5, 5, 5], graph="H"), group("logdet", [6, 6, 6], graph="H")]  # +1: within the slack
    tgt = {"G/d20/eq-def/P8/s*/fed-sparse-expm": (True, ""), "G/d20/eq-def/P8/s*/fed-sparse-logdet": (False, "")}
    md = grid.acyclicity_comparison(groups, tgt)
    rows = {ln.split("|")[1].strip() + ln.split("|")[6].strip(): ln for ln in md.splitlines() if ln.startswith("| G") or ln.startswith("| H")}
    assert "+1.60 ± 1.60 | holds | met → missed | **fails** |" in rows["G–"]
    assert "+6.33 ± 0.67 | **fails** |" in rows["G1"]
    assert "+1.00 ± 0.00 | holds |" in rows["H–"]
    assert "non-private: 1/2 groups pass R1 and R2" in md and "DP: 0/1 groups" in md
    assert grid.acyclicity_comparison([group("expm", [1, 2])], {}) == ""
