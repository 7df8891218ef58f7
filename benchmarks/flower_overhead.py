"""bnsl as a Flower app deployed on loopback: total wall time and per-exchange overhead.

    OPENBLAS_NUM_THREADS=1 python benchmarks/flower_overhead.py [--sites 4] [--rows 1000] [--out DIR]

Cases: d = 20 fed-suffstats --dp (the --dp default: per-site noise, so the bytes equal ``bnsl learn
--noise per-site``'s) and d = 20 fed-sparse, 10 rounds (non-private). Data: ``bnsl simulate`` (ER1,
d edges, seed 1), one CSV per site. Each case runs ``examples/flower/run_local.sh`` (one SuperLink, one
SuperNode per site, ``flwr run``; the time includes starting and stopping them), then ``bnsl learn``
with the same options on the same CSVs; the run folders are compared byte for byte.

Columns: ``flower_s`` the whole script (start-up, the run, shut-down); ``run_s`` the ServerApp's
run as its report times it (``timing.wall_s``: the exchanges, deployed); ``learn_s`` ``bnsl learn``'s
``timing.wall_s`` in process; ``messages`` Flower messages each site answered (HELLO, PLAN, the
protocol's exchanges, DONE); ``per_exchange_s`` = (run_s − learn_s) / the exchanges of the run
(messages minus HELLO, PLAN and DONE): what Flower adds to each exchange (a ClientApp process per
message and the SuperNode's 3-s polling); ``identical``: adjacency.csv, edges.csv and graph.dot equal.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "flower" / "run_local.sh"
BIN = Path(sys.executable).parent
CASES = [
    ("d=20 fed-suffstats --dp (per-site)", "--dp --epsilon 5 --noise per-site --seed 1"),
    ("d=20 fed-sparse, 10 rounds", "-m fed-sparse --rounds 10 --seed 1"),
]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNSL_")}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", BNSL_FLOWER_BIN=str(BIN))
    return env


def _bnsl(*args: str) -> None:
    subprocess.run([str(BIN / "python"), "-m", "bnsl_cli", *args], check=True, env=_env(), capture_output=True)


def _state_seq(work: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from bnsl_cli.net.flower.state import RunStore

    path = next((work / "site-1" / "state").glob("run-*.state"))
    return RunStore(path.parent, int(path.stem.split("-")[1])).load().seq


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites", type=int, default=4)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="keep the data and run folders here")
    args = ap.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="flower-overhead-"))
    data = root / "data"
    _bnsl("simulate", "--nodes", str(args.d), "--edges", str(args.d), "--participants", str(args.sites),
          "--samples", str(args.rows), "--seed", "1", "--out", str(data), "--force", "-q")
    shards = data / "shards" if (data / "shards").is_dir() else data
    csvs = sorted(shards.glob("*.csv"))
    rows = []
    for label, opts in CASES:
        opts = opts.replace("d=20", f"d={args.d}")
        out = root / f"flower-{len(rows)}"
        t0 = time.monotonic()
        res = subprocess.run(["bash", str(SCRIPT), str(shards), str(out), *shlex.split(opts)], env=_env(), check=False,
                             capture_output=True, text=True)
        flower_s = time.monotonic() - t0
        if res.returncode != 0:
            sys.exit(f"{label}: run_local.sh failed ({res.returncode}): {res.stderr}")
        learned = root / f"learn-{len(rows)}"
        _bnsl("learn", *map(str, csvs), *shlex.split(opts), "--out", str(learned), "-q", "--force")
        fl, le = (json.loads((p / "report.json").read_text()) for p in (out, learned))
        same = all((out / n).read_bytes() == (learned / n).read_bytes() for n in ("adjacency.csv", "edges.csv", "graph.dot"))
        messages = _state_seq(Path(str(out) + ".flower"))
        exchanges = max(messages - 3, 1)
        run_s, learn_s = fl["timing"]["wall_s"], le["timing"]["wall_s"]
        rows.append((label.replace("d=20", f"d={args.d}"), args.sites, messages, flower_s, run_s, learn_s,
                     (run_s - learn_s) / exchanges, same))
    print("| case | sites | messages per site | flower_s (script) | run_s (deployed) | learn_s (in process) "
          "| per_exchange_s | identical |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.2f} | {r[6]:.2f} | {'yes' if r[7] else 'NO'} |")
    print(f"\n({os.cpu_count()} CPUs; data and run folders in {root})")


if __name__ == "__main__":
    main()
