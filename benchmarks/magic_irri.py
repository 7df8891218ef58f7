"""magic-irri (64 nodes, 102 arcs; bnlearn repository) over 5 sites × 1,000 rows: issues 19 and 21.

For each data seed, ``networks.py`` samples the network as its parameters say (raw units) into
``ROOT/data-s<seed>/`` (5 shards of 1,000 rows, ``truth.csv``); every run is then one ``bnsl learn``
command on those shards with ``--seed <seed>`` and otherwise the defaults, and one
``bnsl evaluate run/report.json --truth truth.csv --json``. Runs (``--runs`` picks some):

  default          bnsl learn SHARDS                                  (fed-sparse, not private)
  suffstats        bnsl learn SHARDS -m fed-suffstats                 (not private, for reference)
  suffstats-dp5    bnsl learn SHARDS -m fed-suffstats --dp --epsilon 5
  sparse-dp5       bnsl learn SHARDS -m fed-sparse --dp --epsilon 5   (DP-Fed-Sparse-BNSL)
  suffstats-dp1    bnsl learn SHARDS -m fed-suffstats --dp --epsilon 1
  suffstats-dp10   bnsl learn SHARDS -m fed-suffstats --dp --epsilon 10
  suffstats-dp1000 … --dp --epsilon 1000 (noise far below the rows' sampling error: the learner's ceiling)
  suffstats-dp5-persite  … -m fed-suffstats --dp --epsilon 5 --noise per-site  (no secure sum: each
                   site adds the whole noise, P times the variance of the distributed default)
  notears          bnsl learn SHARDS -m notears                       (rows pooled; first seed only)

Commands run one at a time with one BLAS thread; the wall time is that of the whole ``bnsl learn``
process. A run folder that already holds its ``evaluation.json`` for the same command is reused
(``--force`` reruns). The table gives, per run, SHD per seed and the means of SHD, CPDAG-SHD
(``SHD cpdag`` of ``bnsl evaluate``), skeleton recall, edges and seconds; the empty graph's SHD is the
number of true arcs (102). Nothing is tuned to this network: every option is bnsl's default.

  python benchmarks/magic_irri.py [--seeds 1 2 3] [--quick] [--root DIR] [--runs default,suffstats-dp5] [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from networks import load_network, write_shards  # noqa: E402

NETWORK = "magic-irri"
SITES, ROWS = 5, 1000

#: run id → (arguments of `bnsl learn` after the shards, whether it runs on the first seed only)
RUNS: dict[str, tuple[tuple[str, ...], bool]] = {
    "default": ((), False),
    "suffstats": (("-m", "fed-suffstats"), False),
    "suffstats-dp5": (("-m", "fed-suffstats", "--dp", "--epsilon", "5"), False),
    "sparse-dp5": (("-m", "fed-sparse", "--dp", "--epsilon", "5"), False),
    "suffstats-dp1": (("-m", "fed-suffstats", "--dp", "--epsilon", "1"), False),
    "suffstats-dp10": (("-m", "fed-suffstats", "--dp", "--epsilon", "10"), False),
    "suffstats-dp1000": (("-m", "fed-suffstats", "--dp", "--epsilon", "1000"), False),
    "suffstats-dp5-persite": (("-m", "fed-suffstats", "--dp", "--epsilon", "5", "--noise", "per-site"), False),
    "notears": (("-m", "notears"), True),
}
QUICK_RUNS = ("default", "suffstats-dp5", "sparse-dp5")

ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def default_bnsl() -> list[str]:
    exe = Path(sys.executable).with_name("bnsl")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "bnsl_cli"]


def ensure_data(root: Path, seed: int, force: bool = False) -> Path:
    folder = root / f"data-s{seed}"
    manifest = folder / "manifest.json"
    if force or not manifest.is_file():
        write_shards(load_network(NETWORK), folder, SITES, ROWS, seed)
    return folder


def run_one(bnsl: list[str], root: Path, data: Path, seed: int, run: str, force: bool = False) -> dict:
    """Learn + evaluate one run (or reuse its folder); a row of results."""
    args, _ = RUNS[run]
    folder = root / f"s{seed}" / run
    learn = [*bnsl, "learn", str(data / "shards"), *args, "--seed", str(seed), "--force", "--out", str(folder / "run")]
    evaluate = [*bnsl, "evaluate", str(folder / "run" / "report.json"), "--truth", str(data / "truth.csv"),
                "--json", "-q"]
    desc = {"learn": learn, "evaluate": evaluate}
    done = folder / "evaluation.json"
    if not force and done.is_file() and _load(folder / "cmd.json") == desc:
        return _row(run, seed, _load(done))
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (done, folder / "failed.json"):
        stale.unlink(missing_ok=True)
    (folder / "cmd.json").write_text(json.dumps(desc) + "\n", encoding="utf-8")
    env = {**os.environ, **ENV}
    t0 = time.perf_counter()
    proc = subprocess.run(learn, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (folder / "learn.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        failed = {"exit": proc.returncode, "wall_s": wall, "message": last}
        (folder / "failed.json").write_text(json.dumps(failed) + "\n", encoding="utf-8")
        return {"run": run, "seed": seed, "exit": proc.returncode, "seconds": wall, "message": last}
    ev = subprocess.run(evaluate, env=env, capture_output=True, text=True, check=True)
    metrics = json.loads(ev.stdout)[0]
    result = {"wall_s": wall, "metrics": metrics}
    done.write_text(json.dumps(result) + "\n", encoding="utf-8")
    return _row(run, seed, result)


def _load(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _row(run: str, seed: int, result: dict) -> dict:
    m = result["metrics"]
    return {"run": run, "seed": seed, "exit": 0, "shd": m["shd"], "shd_cpdag": m["shd_cpdag"],
            "skeleton_recall": m["skeleton_recall"], "edges": m["nnz"], "tpr": m["tpr"], "fdr": m["fdr"],
            "seconds": result["wall_s"]}


def _mean(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(vals) if vals else float("nan")


def table(rows: list[dict], runs, empty_shd: int) -> str:
    lines = [f"empty graph SHD = {empty_shd} (true arcs)", "",
             "| run | `bnsl learn` options | SHD per seed | SHD | CPDAG-SHD | skeleton recall | edges | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        mine = [r for r in rows if r["run"] == run]
        if not mine:
            continue
        ok = [r for r in mine if r["exit"] == 0]
        per_seed = " ".join(str(r["shd"]) if r["exit"] == 0 else f"exit {r['exit']}" for r in mine)
        opts = " ".join(RUNS[run][0]) or "(defaults)"
        if ok:
            lines.append(f"| {run} | `{opts}` | {per_seed} | {_mean(ok, 'shd'):.1f} | {_mean(ok, 'shd_cpdag'):.1f} | "
                         f"{_mean(ok, 'skeleton_recall'):.2f} | {_mean(ok, 'edges'):.1f} | "
                         f"{_mean(mine, 'seconds'):.1f} |")
        else:
            lines.append(f"| {run} | `{opts}` | {per_seed} | – | – | – | – | {_mean(mine, 'seconds'):.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="data (and learner) seeds")
    ap.add_argument("--quick", action="store_true", help=f"seed 1 only, runs {', '.join(QUICK_RUNS)}")
    ap.add_argument("--runs", default=None, help=f"comma-separated subset of: {', '.join(RUNS)}")
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bnsl-magic-irri",
                    help="work folder for data and runs (default: bnsl-magic-irri in the system's temporary folder)")
    ap.add_argument("--bnsl", default=None, help="the bnsl command (default: this environment's)")
    ap.add_argument("--force", action="store_true", help="rerun runs whose folder is complete")
    a = ap.parse_args(argv)
    seeds = [1] if a.quick else a.seeds
    runs = list(QUICK_RUNS) if a.quick else list(RUNS)
    if a.runs:
        runs = [r.strip() for r in a.runs.split(",") if r.strip()]
        unknown = [r for r in runs if r not in RUNS]
        if unknown:
            ap.error(f"unknown run(s): {', '.join(unknown)}")
    bnsl = shlex.split(a.bnsl) if a.bnsl else default_bnsl()
    net = load_network(NETWORK)
    print(f"# {NETWORK}: {net.d} nodes, {net.arcs} arcs, {net.parameters} parameters; "
          f"{SITES} sites x {ROWS} rows; seeds {seeds}", flush=True)
    print("run,seed,exit,shd,shd_cpdag,skeleton_recall,edges,tpr,fdr,seconds", flush=True)
    rows = []
    for seed in seeds:
        data = ensure_data(a.root, seed, force=a.force)
        for run in runs:
            if RUNS[run][1] and seed != seeds[0]:
                continue
            r = run_one(bnsl, a.root, data, seed, run, force=a.force)
            rows.append(r)
            if r["exit"] == 0:
                # an empty graph has no FDR (no edge): printed empty
                fdr = "" if r["fdr"] is None else f"{r['fdr']:.3f}"
                print(f"{run},{seed},0,{r['shd']},{r['shd_cpdag']},{r['skeleton_recall']:.3f},{r['edges']},"
                      f"{r['tpr']:.3f},{fdr},{r['seconds']:.1f}", flush=True)
            else:
                print(f"{run},{seed},{r['exit']},,,,,,,{r['seconds']:.1f}  # {r['message']}", flush=True)
    print()
    print(table(rows, runs, net.arcs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
