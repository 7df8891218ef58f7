"""Shared benchmark harness: one BLAS thread, each run in a forked child (clean peak memory)."""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import multiprocessing as mp  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from bnsl_cli.io.data import Table  # noqa: E402
from bnsl_cli.learn import LearnConfig, learn  # noqa: E402
from bnsl_cli.metrics import structure_metrics  # noqa: E402
from bnsl_cli.learn import DPConfig  # noqa: E402
from bnsl_cli.simulate import simulate  # noqa: E402


def make_data(d: int, seed: int, participants: int = 8, samples: int = 5000):
    sim = simulate(d, d, participants=participants, samples=samples, seed=seed)
    tables = [Table(X, tuple(sim.names), f"participant-{k + 1:02d}") for k, X in enumerate(sim.shards)]
    return sim.W, tables


#: Method suffix for a fed-sparse run without the polish (``fed-sparse-plain``).
PLAIN = "-plain"


def _child(conn, d, seed, method, epsilon, extra):
    warnings.simplefilter("ignore")
    W_true, tables = make_data(d, seed)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    dp = DPConfig(epsilon=epsilon) if epsilon is not None else None
    label = method
    if method.endswith(PLAIN):  # the method without the polish (the consensus DAG as it is)
        method, extra = method[: -len(PLAIN)], {**extra, "polish": False}
    t0 = time.perf_counter()
    res = learn(tables, LearnConfig(method=method, seed=seed if dp is None else 10_000 + seed, dp=dp, **extra))
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    m = structure_metrics(res.W, W_true)
    comm = res.report["communication"]
    conn.send(
        {
            "d": d, "seed": seed, "method": label + (f" dp ε={epsilon:g}" if dp else ""),
            "time_s": wall, "peak_mb": peak / 1024.0, "data_mb": base / 1024.0,
            "rounds": res.report["rounds"], "shd": m["shd"], "tpr": m["tpr"], "fdr": m["fdr"] or 0.0,
            "up_mb": comm["bytes_up"] / 1e6, "down_mb": comm["bytes_down"] / 1e6,
            "total_mb": comm["bytes_total"] / 1e6,
            "epsilon_spent": (res.report.get("privacy") or {}).get("epsilon"),
        }
    )
    conn.close()


def run_one(d, seed, method, epsilon=None, **extra) -> dict:
    """Run one learn in a forked child and return its measurements."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, d, seed, method, epsilon, extra))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def summarise(rows: list[dict]) -> list[dict]:
    """Group by (d, method): medians for time/memory, means for accuracy, mean bytes."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["d"], r["method"]), []).append(r)
    out = []
    for (d, method), rs in groups.items():
        def mean(k):
            return float(np.mean([r[k] for r in rs]))

        out.append(
            {
                "d": d, "method": method, "seeds": len(rs),
                "time_s": statistics.median(r["time_s"] for r in rs),
                "peak_mb": statistics.median(r["peak_mb"] for r in rs),
                "rounds": mean("rounds"), "shd": mean("shd"), "tpr": mean("tpr"), "fdr": mean("fdr"),
                "up_mb": mean("up_mb"), "down_mb": mean("down_mb"), "total_mb": mean("total_mb"),
            }
        )
    return out


def print_table(summary: list[dict], title: str) -> None:
    cols = ["d", "method", "seeds", "time_s", "peak_mb", "rounds", "shd", "tpr", "fdr", "up_mb", "down_mb", "total_mb"]
    fmt = {"time_s": "{:.2f}", "peak_mb": "{:.0f}", "rounds": "{:.1f}", "shd": "{:.2f}", "tpr": "{:.3f}",
           "fdr": "{:.3f}", "up_mb": "{:.3f}", "down_mb": "{:.3f}", "total_mb": "{:.3f}"}
    cells = [[fmt.get(c, "{}").format(r[c]) for c in cols] for r in summary]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))
