"""Benchmark ``bnsl learn``: wall time, peak memory, the time split, rounds, evaluations of h, bytes,
SHD/TPR/FDR — per dimension and method.

ER1 graphs, P = 8 participants (``--participants``) with 5000 rows each (``--samples``; d = 1000 uses
2000 unless ``--samples`` is given), one BLAS thread, each run in its own forked process (peak
memory = that process's max RSS, data included). Time split: ``read_s`` (the shards written as CSV
and read back with the library's reader; only with ``--read``), ``participants_s`` (the local
solves, summed), ``coordinator_s`` (W-step, duals), ``polish_s`` (everything after the rounds: the
polish exchange and search, the stop broadcast). ``h_evals``: evaluations of the acyclicity function
in the coordinator. Medians of times and memory over seeds, means of the accuracy figures; ratios
are computed inside this one run.

    python benchmarks/bench_learn.py                         # d = 20, 50, 100 (3 seeds), fed-sparse
    python benchmarks/bench_learn.py --dims 200,400 --seeds 1
    python benchmarks/bench_learn.py --dims 20 --compare     # + fed-bnsl on the same data, ratios
    python benchmarks/bench_learn.py --acyclicity expm,logdet --dims 20,50,100   # both h functions
    python benchmarks/bench_learn.py --methods fed-sparse,fed-sparse-plain        # with/without polish
    python benchmarks/bench_learn.py --dp --epsilon 10       # DP rows for both DP methods
    python benchmarks/bench_learn.py --quick                 # d = 10, 1 seed: a smoke test

On a cluster (``examples/cluster/README.md``): the same options print one self-contained shell line
per (d, method, seed) cell — ``bnsl simulate`` (same data as a direct run) → ``bnsl learn`` under a
small Python wrapper (wall seconds and peak RSS of the whole process → ``resources.json``) →
``bnsl evaluate`` in the cell's own folder, skipped when complete — and ``--collect`` prints the
same table from the folders::

    python benchmarks/bench_learn.py --dims 200,400,1000 --seeds 3 --acyclicity expm,logdet \
        --print-commands --out "$PWD/bench" > cells.txt
    parallel --jobs 2 < cells.txt          # or: sbatch --array=1-N examples/cluster/accuracy_grid.sbatch cells.txt
    python benchmarks/bench_learn.py --collect "$PWD/bench" --csv bench.csv

In a collected table ``time_s`` is the whole ``bnsl learn`` process (imports, reading the CSV shards,
learning, writing the outputs) and ``read_s`` that minus the learn report's ``timing.wall_s`` (the
reading, imports and writing); the other columns mean the same as in a direct run. Options that
``bnsl learn`` does not offer (``--screen``, ``--coord``, ``--read``) cannot be printed as commands.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cells import Cell, collect, print_lines  # noqa: E402
from _harness import PLAIN, _time_split, print_table, run_one, summarise  # noqa: E402

#: The learn seed of a run: DP runs use another seed than the data (as ``_harness.run_one``).
DP_SEED_OFFSET = 10_000


def _label(method: str, coord: dict, epsilon) -> str:
    """The method label of a table row (as ``_harness.run_one`` builds it)."""
    tag = "".join(f" {k}={v}" for k, v in coord.items())
    return method + tag + (f" dp ε={epsilon:g}" if epsilon is not None else "")


def make_cell(d: int, seed: int, method: str, epsilon, coord: dict, participants: int, samples: int) -> Cell:
    """One benchmark run as a cell: ``bnsl simulate`` of the harness's data (ER1, d edges, P
    participants × ``samples`` rows, seed), ``bnsl learn`` with the run's options."""
    extra = set(coord) - {"acyclicity"}
    if extra:
        raise ValueError(f"coordinator option(s) {', '.join(sorted(extra))} are not `bnsl learn` options; "
                         "run them directly (without --print-commands)")
    if coord.get("acyclicity") not in (None, "expm") and not method.startswith("fed-sparse"):
        raise ValueError(f"bnsl learn offers --acyclicity {coord['acyclicity']} with fed-sparse only, not {method}")
    name, learn = method, []
    if method.endswith(PLAIN):
        name, learn = method[: -len(PLAIN)], ["--no-polish"]
    learn = ["--method", name, "--seed", str(seed if epsilon is None else DP_SEED_OFFSET + seed), *learn]
    slug = method
    if coord.get("acyclicity"):
        learn += ["--acyclicity", str(coord["acyclicity"])]
        slug += f"-{coord['acyclicity']}"
    if epsilon is not None:
        learn += ["--dp", "--epsilon", f"{epsilon:g}"]
        slug += f"-dp{epsilon:g}"
    sim = ["--graph", "er", "--nodes", str(d), "--edges", str(d), "--participants", str(participants),
           "--samples", str(samples), "--seed", str(seed)]
    params = {"d": d, "seed": seed, "method": _label(method, coord, epsilon), "epsilon": epsilon,
              "acyclicity": coord.get("acyclicity"), "participants": participants, "samples": samples}
    return Cell(f"d{d}/s{seed}/{slug}", params, tuple(sim), tuple(learn))


def _load(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def collect_rows(root: Path) -> tuple[list[dict], list[str]]:
    """The rows of every complete cell under ``root`` in the format of a direct run (see the module
    doc for ``time_s`` / ``read_s``), and the ids of folders without a result."""
    cells, incomplete = collect(root)
    rows = []
    for c in cells:
        folder = root / c["cell"]
        report = _load(folder / "run" / "report.json") or {}
        res = _load(folder / "resources.json") or {}
        learn_s = float((report.get("timing") or {}).get("wall_s") or 0.0)
        process_s = res.get("wall_s")
        comm = report.get("communication") or {}
        rows.append({
            "d": c["d"], "seed": c["seed"], "method": c["method"],
            "time_s": float(process_s) if process_s is not None else learn_s, "learn_s": learn_s,
            **_time_split(report, max(float(process_s) - learn_s, 0.0) if process_s is not None else 0.0),
            "peak_mb": res["peak_rss_kb"] / 1024.0 if res.get("peak_rss_kb") else float("nan"),
            "rounds": report.get("rounds", 0), "shd": c["shd"], "tpr": c["tpr"] or 0.0, "fdr": c["fdr"] or 0.0,
            "up_mb": (comm.get("bytes_up") or 0) / 1e6, "down_mb": (comm.get("bytes_down") or 0) / 1e6,
            "total_mb": (comm.get("bytes_total") or 0) / 1e6,
            "solver_issues": len(report.get("solver_issues") or []),
            "epsilon_spent": (report.get("privacy") or {}).get("epsilon") if isinstance(report.get("privacy"), dict) else None,
        })
    return rows, incomplete


def _samples(d: int, given) -> int:
    if given is not None:
        return given
    return 2000 if d >= 1000 else 5000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="20,50,100", help="comma-separated d (20,50,100,200,400,1000)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default="fed-sparse")
    ap.add_argument("--compare", action="store_true", help="also run fed-bnsl on the same data; print time/byte ratios")
    ap.add_argument("--acyclicity", default="", help="coordinator h function(s) to compare: expm,logdet (default: the coordinator's)")
    ap.add_argument("--screen", default="", help="coordinator screen value(s) to compare, e.g. 0,0.01 (default: the coordinator's)")
    ap.add_argument("--coord", default="", help='coordinator option sets as JSON, e.g. \'[{"acyclicity": "logdet", "maxiter": 50}]\'')
    ap.add_argument("--participants", type=int, default=8)
    ap.add_argument("--samples", type=int, default=None, help="rows per participant (default 5000; 2000 for d ≥ 1000)")
    ap.add_argument("--read", action="store_true", help="write the shards as CSV and time the library's reader")
    ap.add_argument("--dp", action="store_true", help="add DP rows (--dp-methods)")
    ap.add_argument("--dp-methods", default="fed-sparse,fed-bnsl", help="DP rows for these (fed-sparse-plain: no polish)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv", type=Path, help="also write every run as CSV")
    ap.add_argument("--print-commands", action="store_true",
                    help="print one self-contained shell line per (d, method, seed) cell and exit (see examples/cluster/)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_learn"),
                    help="with --print-commands: the cells' root folder (use an absolute path on a cluster)")
    ap.add_argument("--bnsl", default="bnsl", help="with --print-commands: the bnsl command in the lines (default: bnsl)")
    ap.add_argument("--python", default=sys.executable,
                    help="with --print-commands: the Python that measures each learn (default: this one)")
    ap.add_argument("--markdown", action="store_true",
                    help="also print the rows of the benchmarks/RESULTS.md performance table (with load and commit)")
    ap.add_argument("--collect", type=Path, metavar="DIR", help="print the table of the cells under DIR and exit")
    args = ap.parse_args(argv)
    if args.collect is not None:
        rows, incomplete = collect_rows(args.collect)
        if not rows:
            print(f"no complete cell under {args.collect}", file=sys.stderr)
            return 1
        finish(rows, f"bnsl learn benchmark, collected from {args.collect} ({len(rows)} cells)", args.csv,
               "–" if args.markdown else None)
        if incomplete:
            print(f"\n{len(incomplete)} cell folder(s) without a result: {', '.join(incomplete)}")
        return 0
    dims = [int(x) for x in args.dims.split(",") if x]
    methods = [m for m in args.methods.split(",") if m]
    if args.compare and "fed-bnsl" not in methods:
        methods.append("fed-bnsl")
    seeds = args.seeds
    if args.quick:
        dims, seeds = [10], 1
    coords = [{}]
    if args.acyclicity:
        coords = [{"acyclicity": a} for a in args.acyclicity.split(",") if a]
    if args.screen:
        coords = [{**c, "screen": float(s)} for c in coords for s in args.screen.split(",") if s]
    if args.coord:
        coords = json.loads(args.coord)

    plan = [(d, m, None, c) for d in dims for m in methods for c in (coords if m.startswith("fed-") else [{}])]
    if args.dp:
        plan += [(d, m, args.epsilon, c) for d in dims for m in args.dp_methods.split(",") if m for c in coords]
    if args.print_commands:
        if args.read:
            ap.error("--read times the library's reader in a direct run; a cell's bnsl learn always reads CSV")
        cells = []
        for d, m, e, c in plan:
            if c.get("acyclicity") not in (None, "expm") and not m.startswith("fed-sparse"):
                print(f"# skipped: d={d} {m} acyclicity={c['acyclicity']} (bnsl learn offers it with fed-sparse only)",
                      file=sys.stderr)
                continue
            try:
                cells += [make_cell(d, seed, m, e, c, args.participants, _samples(d, args.samples))
                          for seed in range(seeds)]
            except ValueError as exc:
                ap.error(str(exc))
        print_lines(cells, args.out, args.bnsl, measure=shlex.quote(args.python))
        return 0

    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
          f"BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS')}", file=sys.stderr)
    rows = []
    load0 = os.getloadavg()[0]
    for d, method, eps, coord in plan:
        for seed in range(seeds):
            r = run_one(d, seed, method, eps, participants=args.participants, samples=_samples(d, args.samples),
                        read=args.read, coord=coord)
            rows.append(r)
            print(f"  d={d} {r['method']} seed={seed}: {r['time_s']:.2f}s (coordinator {r['coordinator_s']:.2f}s, "
                  f"{r['h_evals']} h evals, participants {r['participants_s']:.2f}s, polish {r['polish_s']:.2f}s) "
                  f"{r['peak_mb']:.0f} MB rounds={r['rounds']} shd={r['shd']} tpr={r['tpr']:.3f} "
                  f"total={r['total_mb']:.3f}MB issues={r['solver_issues']}", file=sys.stderr, flush=True)
    load1 = os.getloadavg()[0]
    load = f"{min(load0, load1):.1f}–{max(load0, load1):.1f}"
    finish(rows, f"bnsl learn benchmark (ER1, P = {args.participants}, one BLAS thread; load average {load})",
           args.csv, load if args.markdown else None)
    return 0


def _commit() -> str:
    """The short git commit of the bnsl_cli that ran (``+`` when its files differ from it), or "?"."""
    import subprocess

    import bnsl_cli

    where = Path(bnsl_cli.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def markdown_rows(summary: list[dict], load: str, when: str) -> str:
    """The rows of benchmarks/RESULTS.md's ``## Performance`` table (d | h | seeds | wall | peak RSS |
    participants | coordinator | polish | rounds | h evals | MB total | SHD | TPR | load | commit, measured)."""
    out = []
    for r in sorted(summary, key=lambda r: (r["d"], r["method"])):
        method = r["method"]
        h = method.split("acyclicity=", 1)[1].split()[0] if "acyclicity=" in method else "default"
        rest = method.replace(f" acyclicity={h}", "")
        if rest.startswith("fed-sparse") and not rest.startswith("fed-sparse-"):
            rest = rest[len("fed-sparse"):].strip()  # the table is about fed-sparse: name only the rest
        label = f"{h} ({rest})" if rest else h
        out.append(
            f"| {r['d']} | {label} | {r['seeds']} | {r['time_s']:.2f} | {r['peak_mb']:.0f} | {r['participants_s']:.2f} "
            f"| {r['coordinator_s']:.2f} | {r['polish_s']:.2f} | {r['rounds']:.1f} | {r['h_evals']:.0f} "
            f"| {r['total_mb']:.2f} | {r['shd']:.2f} | {r['tpr']:.3f} | {load} | `{_commit()}`, {when} |"
        )
    return "\n".join(out)


def finish(rows: list[dict], title: str, csv_path, markdown: str | None = None) -> None:
    """Print the table and the ratios measured in this run; write ``csv_path``; with ``markdown``
    (the load figure) also the RESULTS.md rows."""
    summary = summarise(rows)
    print_table(summary, title)
    if markdown is not None:
        import time

        print("\nrows for benchmarks/RESULTS.md (## Performance)")
        print(markdown_rows(summary, markdown, time.strftime("%H:%M UTC", time.gmtime())))
    by = {(s["d"], s["method"]): s for s in summary}
    print("\nratios measured in this run")
    for d in sorted({s["d"] for s in summary}):
        for s in summary:  # fed-sparse against fed-bnsl with the same coordinator options
            if s["d"] != d or not s["method"].startswith("fed-sparse") or s["method"].startswith("fed-sparse-plain"):
                continue
            fs, fb = s, by.get((d, "fed-bnsl" + s["method"][len("fed-sparse"):]))
            if fb:
                print(f"  d={d}: {fs['method']} / {fb['method']} time {fs['time_s'] / fb['time_s']:.2f}x, "
                      f"bytes total {fs['total_mb'] / fb['total_mb']:.4f}, SHD {fs['shd']:.2f} vs {fb['shd']:.2f}")
        for s in summary:  # logdet against expm, same method and other options
            if s["d"] != d or "acyclicity=logdet" not in s["method"]:
                continue
            b = by.get((d, s["method"].replace("acyclicity=logdet", "acyclicity=expm")))
            if b:
                print(f"  d={d}: {s['method']} / {b['method']} time {s['time_s'] / b['time_s']:.2f}x, "
                      f"coordinator {s['coordinator_s'] / max(b['coordinator_s'], 1e-9):.2f}x, "
                      f"h evals {s['h_evals']:.0f} vs {b['h_evals']:.0f}, SHD {s['shd']:.2f} vs {b['shd']:.2f}")
    if csv_path:
        with open(csv_path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    raise SystemExit(main())
