"""Empirical privacy audit of every release of `bnsl learn --dp` (issue 20 item 8, issue 28 item 5).

For each mechanism — the value-range, column-means and second-moment releases, DP-PGCD's noisy
coordinate update, its Gumbel-max coordinate selection, one whole DP-PGCD step, the polish's second
moments, fed-moments' moment matrix, DP-Fed-BNSL's covariance, and fed-suffstats' scale histograms,
centre histograms and whitened moments through a real site of a real private plan (d = 5) — the real
mechanism code runs ``--trials`` times on each of two neighbouring data sets (a worst-case pair, and
the same with a planted extreme row of ±1e300 / ±1e308 / ±1.7e308), a threshold test is chosen on half
the trials and 95 % Clopper–Pearson lower bounds on ε and (Gaussian releases) on the Gaussian-DP μ
are computed from the other half (bnsl_cli/federated/audit.py). Neither may exceed what the
accountant claims for that release (PLD accountant, δ = 1e-5; μ = sensitivity / noise).

Adversarial inputs (rows starting ``ADVERSARIAL``): a malicious coordinator's crafted stage-1 basis
(L₁₁ = 4/float64-max: NaN exactly for a row beyond 4 sd), ``--bases`` random bases and ``--centres``
random centre requests with extreme finite entries, sent to the site on D and D′; each batch row is the
worst of its messages (bounds held jointly at 95 %), and a note below the table says whether every
message gave the same kind of outcome (refusal and message, or a finite / non-finite reply) on D and D′.
The last rows are deliberately broken mechanisms (column means with a tenth and with half of the
claimed noise), which the audit must catch.

    python benchmarks/privacy_audit.py                    # 20,000 trials per data set and mechanism
    python benchmarks/privacy_audit.py --trials 2000      # quick
    python benchmarks/privacy_audit.py --only suffstats   # cases whose name contains "suffstats"
    python benchmarks/privacy_audit.py --skip coordinate  # all but those (e.g. in two processes)

Prints a markdown table (name, trials, held-out FPR / FNR of the ε test, ε lower bound and claim, μ
lower bound, μ of the ideal mechanism on the pair and claimed μ, verdict, time), the batches' notes
and the total time.
"""

from __future__ import annotations

import argparse
import os
import time

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

from bnsl_cli.federated import audit as A  # noqa: E402
from bnsl_cli.federated.methods.suffstats.audit import random_basis_cases, random_centre_cases  # noqa: E402
from bnsl_cli.federated.methods import registry  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import ParticipantShape, Shapes  # noqa: E402


def suffstats_plan(d: int = 5, rows: int = 50, sites: int = 2, epsilon: float = 5.0) -> RunPlan:
    """The real private plan the site cases run under: fed-suffstats, ``sites`` sites of ``rows`` rows,
    ``d`` columns, ε at δ = 1e-5 by default, per-site noise (each reply carries its release's whole noise)."""
    shapes = Shapes(tuple(f"x{j}" for j in range(d)),
                    tuple(ParticipantShape(f"site-{k}.csv", rows, None) for k in range(sites)))
    return RunPlan.resolve(LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=epsilon, noise="per-site")), shapes)


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def row(r: A.AuditResult, seconds: float) -> str:
    verdict = "holds" if r.passed else "VIOLATED"
    return (f"| {r.name} | {r.trials} | {r.fpr:.4f} | {r.fnr:.4f} | {r.epsilon_lower:.3f} | {r.epsilon_claimed:.3f} | "
            f"{r.mu_lower:.3f} | {_fmt(r.mu_pair)} | {_fmt(r.mu_claimed)} | {verdict} | {seconds:.0f} s |")


HEADER = ("| mechanism | trials | FPR | FNR | ε lower bound | ε claimed | μ lower bound | μ of the pair | μ claimed "
          "| verdict | time |\n|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20_000, help="runs per data set and mechanism")
    ap.add_argument("--batch-trials", type=int, default=400, help="runs per data set and message of the random batches")
    ap.add_argument("--bases", type=int, default=40, help="random extreme bases")
    ap.add_argument("--centres", type=int, default=20, help="random extreme centre requests")
    ap.add_argument("--seed", type=int, default=2026, help="seed of the mechanisms' noise")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    ap.add_argument("--skip", default=None, help="leave out the cases whose name contains this")
    args = ap.parse_args(argv)

    t_all = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    plan = suffstats_plan()

    def wanted(name: str) -> bool:
        return args.only in name and (args.skip is None or args.skip not in name)

    cases = [c for c in registry.audit_cases(rng, plan) + registry.broken_audit_cases(rng) if wanted(c.name)]
    batches = [(f"ADVERSARIAL {A.K.WHITENED_MOMENTS.value}: {args.bases} random extreme bases (worst)",
                lambda: random_basis_cases(rng, plan, args.bases)),
               (f"ADVERSARIAL {A.K.CENTRE_HISTOGRAM.value}: {args.centres} random extreme centre requests (worst)",
                lambda: random_centre_cases(rng, plan, args.centres))]
    batches = [(name, make) for name, make in batches if wanted(name)]
    print(f"privacy audit: {args.trials} trials per data set ({args.batch_trials} per message of a batch), "
          f"delta = {A.AUDIT_DELTA:g}, 95 % Clopper-Pearson; fed-suffstats site: d = {plan.d}, "
          f"{plan.participants[0].rows} rows, plan epsilon = {plan.privacy.epsilon:g}, per-site noise")
    print(HEADER)
    notes, failed = [], []
    for c in cases:
        t0 = time.perf_counter()
        r = c.run(args.trials)
        print(row(r, time.perf_counter() - t0), flush=True)
        if not r.passed:
            failed.append(r.name)
    for name, make in batches:
        t0 = time.perf_counter()
        r = A.audit_batch(name, make(), args.batch_trials)
        print(row(r, time.perf_counter() - t0), flush=True)
        notes.append(r.note)
        if not r.passed:
            failed.append(r.name)
    print()
    for note in notes:
        print(f"- {note}")
    print(f"\nviolated: {len(failed)} of {len(cases) + len(batches)}"
          + (" (" + "; ".join(failed) + ")" if failed else ""))
    print(f"total time: {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
