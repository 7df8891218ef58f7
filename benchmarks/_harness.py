"""Shared benchmark harness: one BLAS thread, each run in a forked child (clean peak memory).

A run: simulate an ER1 problem (P participants × n rows), optionally write the shards as CSV and
read them back with the library's reader (``read=True``: the "read" share of the time), then
``learn`` with the given options, and measure wall time, peak RSS (the child's max RSS), the time
split (read / participants / coordinator / polish), rounds, evaluations of h, bytes and SHD/TPR/FDR.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import multiprocessing as mp  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.learn import DPConfig, LearnConfig, learn  # noqa: E402
from bnsl_cli.metrics import structure_metrics  # noqa: E402
from bnsl_cli.simulate import simulate  # noqa: E402


def make_data(d: int, seed: int, participants: int = 8, samples: int = 5000):
    sim = simulate(d, d, participants=participants, samples=samples, seed=seed)
    tables = [Table(X, tuple(sim.names), f"participant-{k + 1:02d}") for k, X in enumerate(sim.shards)]
    return sim.W, tables


def _read_back(tables) -> tuple[list, float]:
    """Write the shards as CSV in a temporary folder, read them with the library's reader; the
    seconds the reading took."""
    from bnsl_cli.io.shards import read_shards

    with tempfile.TemporaryDirectory(prefix="bnsl-bench-") as tmp:
        paths = []
        for t in tables:
            path = os.path.join(tmp, f"{Path(t.path).name}.csv")
            with open(path, "w") as fh:
                fh.write(",".join(t.names) + "\n")
                np.savetxt(fh, t.X, delimiter=",", fmt="%.17g")
            paths.append(path)
        t0 = time.perf_counter()
        out = read_shards(paths)
        return out, time.perf_counter() - t0


#: Method suffix for a fed-sparse run without the polish (``fed-sparse-plain``).
PLAIN = "-plain"


def _coordinator_options(options: dict):
    """Make every Coordinator built in this (forked) process use ``options`` (e.g.
    ``{"acyclicity": "logdet"}``) — for comparisons of coordinator options the run plan does not
    carry."""
    if not options:
        return
    import bnsl_cli.federated.methods.admm.driver as admm
    from bnsl_cli.federated.methods.admm.coordinator import Coordinator

    class _Configured(Coordinator):
        def __init__(self, *a, **k):
            super().__init__(*a, **{**k, **options})

    admm.Coordinator = _Configured


def _time_split(report: dict, read_s: float) -> dict:
    timing = report.get("timing") or {}
    history = report.get("history") or []
    local = sum(float(h.get("local_s", 0.0)) for h in history)
    rounds = sum(float(h.get("round_s", 0.0)) for h in history)
    protocol = float(timing.get("protocol_s", rounds))
    return {
        "read_s": read_s,
        "participants_s": local,
        "coordinator_s": float(timing.get("server_s", 0.0)),
        # after the rounds: the polish exchange and search, the stop broadcast
        "polish_s": max(protocol - rounds, 0.0),
        "h_evals": int(timing.get("server_evaluations", 0)),
    }


def _child(conn, d, seed, method, epsilon, extra, participants, samples, read, coord):
    try:
        warnings.simplefilter("ignore")
        if "acyclicity" in coord and method.startswith("fed-sparse"):
            # a run-plan option for fed-sparse (so the report names it); other methods: below
            coord = dict(coord)
            extra = {**extra, "acyclicity": coord.pop("acyclicity")}
        _coordinator_options(coord)
        W_true, tables = make_data(d, seed, participants, samples)
        read_s = 0.0
        if read:
            tables, read_s = _read_back(tables)
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
        comm = res.report.get("communication") or {"bytes_up": 0, "bytes_down": 0, "bytes_total": 0}
        tag = f" acyclicity={extra['acyclicity']}" if "acyclicity" in extra else ""
        tag += "".join(f" {k}={v}" for k, v in coord.items())
        conn.send(
            {
                "d": d, "seed": seed, "method": label + tag + (f" dp ε={epsilon:g}" if dp else ""),
                "time_s": wall + read_s, "learn_s": wall, **_time_split(res.report, read_s),
                "peak_mb": peak / 1024.0, "data_mb": base / 1024.0,
                "rounds": res.report.get("rounds", 0), "shd": m["shd"], "tpr": m["tpr"] or 0.0, "fdr": m["fdr"] or 0.0,
                "up_mb": comm["bytes_up"] / 1e6, "down_mb": comm["bytes_down"] / 1e6,
                "total_mb": comm["bytes_total"] / 1e6,
                "solver_issues": len(res.report.get("solver_issues") or []),
                "epsilon_spent": (res.report.get("privacy") or {}).get("epsilon"),
            }
        )
    except BaseException as exc:  # report, never hang the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def run_one(d, seed, method, epsilon=None, *, participants=8, samples=5000, read=False, coord=None, **extra) -> dict:
    """Run one learn in a forked child and return its measurements. ``coord``: Coordinator options
    (``acyclicity``, ``screen``, …) for this run."""
    return in_child(
        _child, (d, seed, method, epsilon, extra, participants, samples, read, dict(coord or {})),
        f"d={d} seed={seed} {method}",
    )


def in_child(target, args: tuple, label: str) -> dict:
    """``target(conn, *args)`` in a forked child that sends one dict back on ``conn``; that dict
    (peak RSS is then the child's alone). A dict with ``error`` → ``RuntimeError`` naming ``label``."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(child, *args))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    if "error" in out:
        raise RuntimeError(f"{label}: {out['error']}")
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

        def med(k):
            return statistics.median(r[k] for r in rs)

        out.append(
            {
                "d": d, "method": method, "seeds": len(rs),
                "time_s": med("time_s"), "read_s": med("read_s"), "participants_s": med("participants_s"),
                "coordinator_s": med("coordinator_s"), "polish_s": med("polish_s"), "h_evals": med("h_evals"),
                "peak_mb": med("peak_mb"),
                "rounds": mean("rounds"), "shd": mean("shd"), "tpr": mean("tpr"), "fdr": mean("fdr"),
                "up_mb": mean("up_mb"), "down_mb": mean("down_mb"), "total_mb": mean("total_mb"),
                "issues": mean("solver_issues"),
            }
        )
    return out


COLUMNS = ["d", "method", "seeds", "time_s", "read_s", "participants_s", "coordinator_s", "polish_s", "h_evals",
           "peak_mb", "rounds", "shd", "tpr", "fdr", "up_mb", "down_mb", "total_mb", "issues"]
FORMATS = {"time_s": "{:.2f}", "read_s": "{:.2f}", "participants_s": "{:.2f}", "coordinator_s": "{:.2f}",
           "polish_s": "{:.2f}", "h_evals": "{:.0f}", "peak_mb": "{:.0f}", "rounds": "{:.1f}", "shd": "{:.2f}",
           "tpr": "{:.3f}", "fdr": "{:.3f}", "up_mb": "{:.3f}", "down_mb": "{:.3f}", "total_mb": "{:.3f}",
           "issues": "{:.1f}"}


def print_table(summary: list[dict], title: str) -> None:
    cells = [[FORMATS.get(c, "{}").format(r[c]) for c in COLUMNS] for r in summary]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]
    print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))
