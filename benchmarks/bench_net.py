"""Networked runs on loopback: round latency of the gRPC transport, and a whole run against the
in-process one.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_net.py latency
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_net.py run

``latency``: sites are forked processes whose participant answers instantly with a fixed sparse
update (no compute), so one ``fleet.exchange`` is the transport's round trip coordinator → all sites
→ coordinator. Medians and 90th percentiles over the rounds, plaintext and mutual TLS.

``run``: d = 20 ER1, P = 8 (5000 rows each), the same plan run in process (``bnsl learn``'s fleet,
one worker — the default — and 8 worker processes) and over loopback gRPC + mutual TLS with 8 site processes (``bnsl serve`` / ``bnsl join``'s code
path), alternating, several repetitions; wall time of ``run()`` (sites already connected).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402


class _Echo:
    """Answers a broadcast at once with ``entries`` changed coordinates (no compute)."""

    def __init__(self, pid, d, entries):
        from bnsl_cli.federated.messages import SparseEntries

        rng = np.random.default_rng(pid)
        k = rng.choice(d * d, size=entries, replace=False)
        self.pid, self.d = pid, d
        self.entries = SparseEntries((k // d).astype(np.int32), (k % d).astype(np.int32), rng.normal(size=entries))

    def handle(self, data):
        from bnsl_cli.federated.messages import HEADER, SparseUpdate

        _, _, rnd, _, _, _ = HEADER.unpack_from(data, 0)
        if data[HEADER.size + 1] == 1:
            return None
        return SparseUpdate(rnd, self.pid, self.d, self.entries, 1.0).encode()


def _site(port, k, d, entries, certdir):
    from bnsl_cli.net.site import run_site
    from bnsl_cli.net.tls import load_party

    creds = None
    if certdir:
        c = Path(certdir)
        creds = load_party(c / "ca.pem", c / f"site{k:02d}.pem", c / f"site{k:02d}.key")
    run_site(f"127.0.0.1:{port}", {"site": f"site{k:02d}", "columns": [f"X{i}" for i in range(d)], "rows": 100},
             lambda plan: _Echo(plan["index"], d, entries), credentials=creds, timeout=60)


def _certs(P):
    from bnsl_cli.net.tls import make_certs

    certdir = tempfile.mkdtemp(prefix="bnsl-bench-certs-")
    # a site's name is its certificate's: site00, site01, … keep the order of the shards' files
    make_certs(Path(certdir), ["coordinator"] + [f"site{k:02d}" for k in range(P)])
    return certdir


def latency(P: int, d: int, rounds: int, tls: bool) -> dict:
    from bnsl_cli.federated.methods.admm.coordinator import Coordinator, PenaltySchedule
    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.net.tls import load_party

    certdir = _certs(P) if tls else None
    creds = load_party(*(Path(certdir) / n for n in ("ca.pem", "coordinator.pem", "coordinator.key"))) if tls else None
    fleet = NetworkFleet("127.0.0.1:0", P, creds, timeout=60)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_site, args=(fleet.port, k, d, 3 * d // 2, certdir), daemon=True) for k in range(P)]
    for p in procs:
        p.start()
    try:
        fleet.gather(60)
        fleet.start(lambda i: {"index": i})
        coord = Coordinator(d, P, PenaltySchedule(1e-3, 1e-3, 1.75, 1.25, 1e16), snap=0.05)
        rng = np.random.default_rng(0)
        W = np.where(rng.random((d, d)) < 2.0 / d, rng.normal(size=(d, d)), 0.0)
        np.fill_diagonal(W, 0.0)
        coord.W = W
        times, sizes = [], []
        for _ in range(rounds):
            msg = coord.broadcast()
            t0 = time.perf_counter()
            replies = fleet.exchange(msg)
            times.append(time.perf_counter() - t0)
            sizes.append(len(msg) + sum(len(r) for r in replies))
        fleet.exchange(coord.broadcast(stop=True))
        fleet.finish()
        fleet.close(ok=True)
    finally:
        fleet.close()
        for p in procs:
            p.join(10)
    times = np.array(times[5:]) * 1e3  # the first rounds warm up the connections
    return {"P": P, "d": d, "tls": tls, "median_ms": float(np.median(times)), "p90_ms": float(np.percentile(times, 90)),
            "bytes_per_round": int(np.median(sizes))}


def _run_site_proc(port, k, path, certdir):
    from bnsl_cli.net.site import run_site
    from bnsl_cli.net.tls import load_party
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.io.csv_reader import read_table
    from bnsl_cli.plan.run_plan import RunPlan

    c = Path(certdir)
    creds = load_party(c / "ca.pem", c / f"site{k:02d}.pem", c / f"site{k:02d}.key")
    t = read_table(path)

    def on_plan(body):
        plan = RunPlan.from_dict(body["plan"])
        return make_participant(plan, body["index"], t.X, None)

    from bnsl_cli.net.common import FederationError

    misses = 0
    while misses < 600:  # one run per repetition; between them the coordinator restarts
        try:
            run_site(f"127.0.0.1:{port}", {"site": f"site{k:02d}", "columns": list(t.names), "rows": t.n}, on_plan,
                     credentials=creds, timeout=120, connect_timeout=2)
            misses = 0
        except FederationError:
            misses += 1
            time.sleep(0.1)


def whole_run(reps: int) -> dict:
    import warnings

    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.net.tls import load_party
    from bnsl_cli.io.shards import read_shards
    from bnsl_cli.plan.options import LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes
    from bnsl_cli.run import local_fleet, run
    from bnsl_cli.simulate import simulate

    warnings.simplefilter("ignore")
    P, d = 8, 20
    sim = simulate(d, d, participants=P, samples=5000, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="bnsl-bench-net-"))
    paths = []
    for k, X in enumerate(sim.shards):
        p = tmp / f"site{k:02d}.csv"
        np.savetxt(p, X, delimiter=",", header=",".join(sim.names), comments="")
        paths.append(p)
    tables = read_shards(paths)
    cfg = LearnConfig(seed=0)
    plan_local = RunPlan.resolve(cfg, Shapes.of_tables(tables))
    plan_workers = RunPlan.resolve(LearnConfig(seed=0, workers=P), Shapes.of_tables(tables))
    certdir = _certs(P)
    creds = load_party(*(Path(certdir) / n for n in ("ca.pem", "coordinator.pem", "coordinator.key")))
    fleet_port = None
    local_s, workers_s, net_s, same = [], [], [], []
    ctx = mp.get_context("spawn")
    procs = []
    for rep in range(reps):
        # in process
        t0 = time.perf_counter()
        fl = local_fleet(plan_local, tables)
        try:
            res0 = run(plan_local, fl)
        finally:
            fl.close()
        local_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fl = local_fleet(plan_workers, tables)
        try:
            run(plan_workers, fl)
        finally:
            fl.close()
        workers_s.append(time.perf_counter() - t0)
        # over the network (the sites reconnect for every repetition)
        fleet = NetworkFleet(f"127.0.0.1:{fleet_port or 0}", P, creds, timeout=120)
        fleet_port = fleet.port
        if not procs:
            procs = [ctx.Process(target=_run_site_proc, args=(fleet.port, k, str(paths[k]), certdir), daemon=True)
                     for k in range(P)]
            for p in procs:
                p.start()
        try:
            hellos = fleet.gather(120)
            shapes = Shapes(tuple(hellos[0]["columns"]), tuple(ParticipantShape(h["site"], h["rows"]) for h in hellos))
            plan = RunPlan.resolve(cfg, shapes)
            body = plan.to_dict()
            t0 = time.perf_counter()
            fleet.start(lambda i: {"plan": body, "index": i})
            res1 = run(plan, fleet)
            net_s.append(time.perf_counter() - t0)
            fleet.close(ok=True)
        finally:
            fleet.close()
        same.append(bool(np.array_equal(res0.W, res1.W)))
    for p in procs:
        p.terminate()
        p.join(5)
    return {"in_process_s": local_s, "workers_s": workers_s, "network_s": net_s, "same_W": same,
            "ratio_median": statistics.median(n / l for n, l in zip(net_s, local_s))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["latency", "run"])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    if a.what == "latency":
        print(f"{'sites':>5} {'d':>4} {'transport':>10} {'median ms':>10} {'p90 ms':>8} {'bytes/round':>12}")
        for tls in (False, True):
            for P in (2, 4, 8):
                for d in (20, 100):
                    r = latency(P, d, a.rounds, tls)
                    print(f"{P:>5} {d:>4} {'mTLS' if tls else 'plaintext':>10} {r['median_ms']:>10.2f} "
                          f"{r['p90_ms']:>8.2f} {r['bytes_per_round']:>12}", flush=True)
    else:
        r = whole_run(a.reps)
        print(f"{'rep':>3} {'in-process s':>13} {'8 workers s':>12} {'network s':>10} {'ratio':>6} {'same W':>7}")
        for k, (l, w, n, s) in enumerate(zip(r["in_process_s"], r["workers_s"], r["network_s"], r["same_W"])):
            print(f"{k + 1:>3} {l:>13.3f} {w:>12.3f} {n:>10.3f} {n / l:>6.2f} {str(s):>7}")
        print(f"median ratio network / in-process (1 worker, bnsl learn's default): {r['ratio_median']:.2f}")
        print("median ratio network / in-process with 8 worker processes: "
              f"{statistics.median(n / w for n, w in zip(r['network_s'], r['workers_s'])):.2f}")


if __name__ == "__main__":
    sys.exit(main())
