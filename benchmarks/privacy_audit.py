"""Empirical privacy audit of every mechanism of `bnsl learn --dp` (issue 20 item 8), large version.

For each mechanism — the column-means and second-moment releases, DP-PGCD's noisy coordinate update,
its Gumbel-max coordinate selection, one whole DP-PGCD step, the polish's second moments and the
fed-moments moment matrix — the real mechanism code runs ``--trials`` times on each of two
neighbouring data sets (a worst-case pair, and the same with a planted extreme row), a threshold test
is chosen on half the trials and a 95 % Clopper–Pearson lower bound on ε is computed from the other
half (bnsl_cli/federated/audit.py). The bound must not exceed the ε the accountant claims for that
release (PLD accountant, δ = 1e-5). The last row is a deliberately broken mechanism (column means with
a tenth of the claimed noise), which the audit must catch.

    python benchmarks/privacy_audit.py                    # 100,000 trials per data set and mechanism
    python benchmarks/privacy_audit.py --trials 5000      # quick
    python benchmarks/privacy_audit.py --only update      # cases whose name contains "update"
    python benchmarks/privacy_audit.py --skip coordinate  # all but those (e.g. in two processes)

Prints a table (name, trials, held-out FPR / FNR, ε lower bound, claimed ε, verdict) and the time.
"""

from __future__ import annotations

import argparse
import os
import time

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

from bnsl_cli.federated import audit as A  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100_000, help="runs per data set and mechanism")
    ap.add_argument("--seed", type=int, default=2026, help="seed of the mechanisms' noise")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    ap.add_argument("--skip", default=None, help="leave out the cases whose name contains this")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    cases = A.all_cases(rng) + [A.means_case(rng, broken=True)]
    cases = [c for c in cases if args.only in c.name and (args.skip is None or args.skip not in c.name)]
    print(f"privacy audit: {args.trials} trials per data set, delta = {A.AUDIT_DELTA:g}, 95 % Clopper-Pearson")
    print(f"| mechanism | trials | FPR | FNR | ε lower bound | ε claimed | verdict | time |")
    print("|---|---|---|---|---|---|---|---|")
    for c in cases:
        t0 = time.perf_counter()
        r = A.audit(c.name, c.run_d, c.run_d1, args.trials, c.epsilon_claimed, A.AUDIT_DELTA)
        verdict = "holds" if r.passed else "VIOLATED"
        print(f"| {r.name} | {r.trials} | {r.fpr:.4f} | {r.fnr:.4f} | {r.epsilon_lower:.3f} | "
              f"{r.epsilon_claimed:.3f} | {verdict} | {time.perf_counter() - t0:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
