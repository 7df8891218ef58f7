"""Secure aggregation: the cost of masking, and split noise against each site's own noise.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_secure.py mask
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_secure.py split

``mask``: median time of one site's ``SecureSum.mask`` and of the coordinator's ``unmask_sum`` for
P sites and a vector of n values (20 repetitions each).

``split``: fed-moments --dp over loopback gRPC with ``--secure-sum`` (sites in threads of this
process, plaintext), each site adding its own full noise against ``--split-noise``; SHD to the true
graph per seed (ER1, ``--value-bound 10``).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402


def mask(reps: int = 20) -> None:
    from bnsl_cli.federated.secure_sum import SecureSum, generate_keypair, unmask_sum

    for P, n in ((3, 2500), (8, 2500), (8, 40000)):
        keys = [generate_keypair() for _ in range(P)]
        site = SecureSum(0, keys[0][0], [k[1] for k in keys], b"bench")
        v = np.random.default_rng(0).normal(size=n)
        tm, tu = [], []
        for i in range(reps):
            t0 = time.perf_counter()
            site.mask(v, f"t{i}".encode())
            tm.append(time.perf_counter() - t0)
        ys = [np.random.default_rng(i).integers(0, 2**63, size=n, dtype=np.uint64) for i in range(P)]
        for _ in range(reps):
            t0 = time.perf_counter()
            unmask_sum(ys)
            tu.append(time.perf_counter() - t0)
        print(f"P={P} n={n}: mask {statistics.median(tm) * 1e3:.2f} ms, unmask {statistics.median(tu) * 1e3:.2f} ms")


def _loopback(plan, tables):
    """``run(plan)`` with secure sums over loopback gRPC, one site per table in a thread."""
    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.net.site import run_site
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.federated.secure_sum import generate_keypair
    from bnsl_cli.run import participant_rngs, run

    keys = [generate_keypair() for _ in tables]
    rngs = participant_rngs(plan)
    fleet = NetworkFleet("127.0.0.1:0", plan.P, timeout=60)
    fleet.secure_sum = True
    threads = []
    for k, t in enumerate(tables):
        hello = {"site": f"site{k}", "columns": list(t.names), "rows": t.n, "x25519": keys[k][1].hex()}
        th = threading.Thread(target=run_site, daemon=True, args=(
            f"127.0.0.1:{fleet.port}", hello,
            lambda body, t=t: make_participant(plan, body["index"], t.X, rngs[body["index"]])),
            kwargs={"secure_key": keys[k][0], "connect_timeout": 5, "timeout": 60})
        th.start()
        threads.append(th)
    try:
        fleet.gather(60)
        spec = {"public_keys": [s.hello["x25519"] for s in fleet.sites], "run_id": os.urandom(16).hex(), "scale_bits": 32}
        fleet.start(lambda i: {"index": i, "secure_sum": spec})
        result = run(plan, fleet)
        fleet.close(ok=True)
    finally:
        fleet.close()
        for th in threads:
            th.join(30)
    return result


def split(d: int, P: int, n: int, epsilons, seeds) -> None:
    from bnsl_cli.io.table import Table
    from bnsl_cli.metrics import structure_metrics
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes
    from bnsl_cli.privacy.split_noise import split_noise_plan
    from bnsl_cli.simulate import simulate

    warnings.simplefilter("ignore")
    for eps in epsilons:
        rows = []
        for seed in seeds:
            sim = simulate(d, d, participants=P, samples=n, seed=seed)
            tables = [Table(X, tuple(sim.names), f"site{k}") for k, X in enumerate(sim.shards)]
            cfg = LearnConfig(method="fed-moments", dp=DPConfig(epsilon=eps, value_bound=10.0), seed=seed)
            plan = RunPlan.resolve(cfg, Shapes.of_tables(tables))
            own = structure_metrics(_loopback(plan, tables).W, sim.W)["shd"]
            spl = structure_metrics(_loopback(split_noise_plan(plan), tables).W, sim.W)["shd"]
            rows.append(f"seed {seed}: {own} / {spl}")
        print(f"d={d} ER1 P={P} n_p={n} eps={eps}: SHD own noise / split noise: " + "; ".join(rows))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["mask", "split"])
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--participants", type=int, default=8)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, nargs="+", default=[2.0, 5.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    a = ap.parse_args(argv)
    if a.what == "mask":
        mask()
    else:
        split(a.d, a.participants, a.samples, a.epsilon, a.seeds)


if __name__ == "__main__":
    main()
