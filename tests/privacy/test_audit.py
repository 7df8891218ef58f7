"""Empirical privacy audit (issue 20 item 8, issue 28 item 5): every release, run through its real code
on a worst-case neighbouring pair, must not reveal more than the accountant claims for that release —
whatever rows arrive and whatever message a (malicious) coordinator sends.

For each case the two data sets differ in one row; the test runs the mechanism ``TRIALS`` times on
each, picks threshold tests on half the trials and computes 95 % Clopper–Pearson lower bounds on ε and
(Gaussian releases) on the Gaussian-DP μ from the other half (bnsl_cli/federated/audit.py). Neither may
exceed the claim (the PLD accountant's ε of the release at δ = 1e-5; μ = sensitivity / noise).
Deliberately broken mechanisms (noise ten and two times smaller than claimed) must fail the same audit,
which shows that the audit can fail. The 20,000-trial version is benchmarks/privacy_audit.py (results
in benchmarks/RESULTS.md).

The fed-suffstats cases run a real ``SuffstatsSite`` of a real private plan (d = 5) on encoded messages,
including issue 28's crafted basis (``L₁₁ = 4/float64-max``: a NaN reply exactly when a row lies
beyond 4 standard deviations, a certain membership test) and random bases and centre requests with
extreme finite entries: each must give the same kind of outcome (the same refusal, or a finite reply)
on D and D′. These fail on a site that whitens such a basis (before commit 688e6db, and with the site's
checks switched off: ``test_the_audit_catches_the_crafted_basis_without_the_sites_checks``).
"""

import numpy as np
import pytest

import bnsl_cli.federated.methods.suffstats.site as ss_site
from bnsl_cli.federated import audit as A
from bnsl_cli.federated.methods.admm.audit import covariance_case, pgcd_step_case, polish_case, selection_case, update_case
from bnsl_cli.federated.methods.moments.audit import moment_matrix_case
from bnsl_cli.federated.methods.suffstats.audit import centre_histogram_case, crafted_basis_case, random_basis_cases, random_centre_cases, scale_histogram_case, whitened_moments_case
from bnsl_cli.federated.methods import registry
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes

#: trials per data set (half choose the tests, half bound ε and μ)
TRIALS = {"fast": 1000, "pgcd": 500, "site": 300}
#: trials per data set and message of the random-message batches: enough that one message that tells
#: D from D′ every time shows (μ bound ≈ 1.5 against 0.41 at the batch's joint 95 %)
BATCH_TRIALS = 60


@pytest.fixture(scope="module")
def plan():
    """A real private fed-suffstats plan: 2 sites of 50 rows, d = 5, ε = 5, per-site noise."""
    shapes = Shapes(tuple(f"x{j}" for j in range(5)), tuple(ParticipantShape(f"site-{k}.csv", 50, None) for k in range(2)))
    return RunPlan.resolve(LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=5, noise="per-site")), shapes)


CASES = [
    ("means", A.means_case, {}, "fast"),
    ("means-extreme", A.means_case, {"extreme": True}, "fast"),
    ("second-moments", A.second_moments_case, {}, "fast"),
    ("second-moments-extreme", A.second_moments_case, {"extreme": True}, "fast"),
    ("value-range-raw", A.value_range_case, {}, "fast"),
    ("value-range-raw-extreme", A.value_range_case, {"extreme": True}, "fast"),
    ("value-range-centred", A.value_range_case, {"centred": True}, "fast"),
    ("value-range-centred-extreme", A.value_range_case, {"centred": True, "extreme": True}, "fast"),
    ("update", update_case, {}, "pgcd"),
    ("update-extreme", update_case, {"extreme": True}, "pgcd"),
    ("update-extreme-1e39", update_case, {"extreme": "overflow"}, "pgcd"),
    ("selection", selection_case, {}, "pgcd"),
    ("selection-extreme", selection_case, {"extreme": True}, "pgcd"),
    ("pgcd-step", pgcd_step_case, {}, "pgcd"),
    ("pgcd-step-extreme", pgcd_step_case, {"extreme": True}, "pgcd"),
    ("polish", polish_case, {}, "fast"),
    ("polish-extreme", polish_case, {"extreme": True}, "fast"),
    ("moment-matrix", moment_matrix_case, {}, "fast"),
    ("moment-matrix-extreme", moment_matrix_case, {"extreme": True}, "fast"),
    ("covariance", covariance_case, {}, "fast"),
    ("covariance-extreme", covariance_case, {"extreme": True}, "fast"),
]

SITE_CASES = [
    ("scale-histogram", scale_histogram_case, {}),
    ("scale-histogram-extreme", scale_histogram_case, {"extreme": True}),
    ("centre-histogram", centre_histogram_case, {}),
    ("centre-histogram-extreme", centre_histogram_case, {"extreme": True}),
    ("whitened-moments", whitened_moments_case, {}),
    ("whitened-moments-extreme", whitened_moments_case, {"extreme": True}),
]


def _holds(r):
    assert r.epsilon_claimed > 0
    assert r.epsilon_lower <= r.epsilon_claimed, r
    assert r.mu_claimed is None or r.mu_lower <= r.mu_claimed, r


@pytest.mark.parametrize("make, kwargs, size", [pytest.param(m, kw, s, id=name) for name, m, kw, s in CASES])
def test_audit_lower_bound_stays_below_the_claim(make, kwargs, size):
    case = make(np.random.default_rng(2026), **kwargs)
    _holds(case.run(TRIALS[size]))


@pytest.mark.parametrize("make, kwargs", [pytest.param(m, kw, id=name) for name, m, kw in SITE_CASES])
def test_suffstats_site_release_stays_below_the_claim(plan, make, kwargs):
    """Fed-suffstats' releases through a real site (d = 5): every reply finite, the bounds below the claim."""
    case = make(np.random.default_rng(2026), plan, **kwargs)
    _holds(case.run(TRIALS["site"]))
    assert set(case.kinds[0]) == set(case.kinds[1]) == {"finite reply"}, case.kinds


def test_the_pairs_move_each_gaussian_release_by_its_full_sensitivity(plan):
    """The audit's honest pairs are worst cases: the ideal mechanism's μ on the pair is the claimed μ
    (within 10⁻³; the whitened moments' rows are clipped within 10⁻⁴ of orthogonal)."""
    rng = np.random.default_rng(0)
    cases = [m(rng) for m in (A.means_case, A.second_moments_case, update_case, polish_case, moment_matrix_case,
                              covariance_case)]
    cases += [m(rng, plan) for m in (scale_histogram_case, centre_histogram_case, whitened_moments_case)]
    for c in cases:
        assert c.mu_pair == pytest.approx(c.mu_claimed, rel=1e-3), c.name


def test_the_crafted_basis_gives_the_same_refusal_on_both_data_sets(plan):
    """Issue 28: the stage-1 basis with ``L₁₁ = 4/float64-max`` must be refused on the message alone
    (UnsafeMessageError, the same message on D and D′), so the audit's bound is 0. Fails on a site
    that whitens with it: NaN replies on D′ only, the bound at the most these trials can show."""
    case = crafted_basis_case(np.random.default_rng(2026), plan)
    r = case.run(TRIALS["site"])
    assert set(case.kinds[0]) == set(case.kinds[1]), case.kinds
    (kind,) = set(case.kinds[0])
    assert kind.startswith("refused: UnsafeMessageError: "), kind
    assert r.epsilon_lower == 0.0 and r.mu_lower == 0.0, r
    _holds(r)


def test_random_extreme_bases_give_the_same_outcome_on_both_data_sets(plan):
    """40 random bases with extreme finite entries (inf − inf constructions, 1e300, 5e-324,
    ±float64-max, tiny and huge diagonals, extreme centres and scales, an upper triangle, a diagonal
    entry ≤ 0): each gives the same kind of outcome on D and D′ and never a non-finite reply."""
    cases = random_basis_cases(np.random.default_rng(2026), plan, 40)
    r = A.audit_batch("random bases", cases, BATCH_TRIALS)
    differ = [(c.name, dict(c.kinds[0]), dict(c.kinds[1])) for c in cases if set(c.kinds[0]) != set(c.kinds[1])]
    assert not differ, differ
    assert not any("non-finite reply" in c.kinds[k] for c in cases for k in (0, 1)), r.note
    _holds(r)


def test_random_extreme_centre_requests_give_the_same_outcome_on_both_data_sets(plan):
    cases = random_centre_cases(np.random.default_rng(2026), plan, 20)
    r = A.audit_batch("random centre requests", cases, BATCH_TRIALS)
    differ = [(c.name, dict(c.kinds[0]), dict(c.kinds[1])) for c in cases if set(c.kinds[0]) != set(c.kinds[1])]
    assert not differ, differ
    assert not any("non-finite reply" in c.kinds[k] for c in cases for k in (0, 1)), r.note
    _holds(r)


def test_the_audit_catches_a_broken_mechanism():
    """The same Gaussian release with a tenth of the claimed noise: the ε bound exceeds the claim; with
    half of it the μ bound does (the ε bound of a threshold test cannot show a factor 2 at these trials)."""
    tenth, half = registry.broken_audit_cases(np.random.default_rng(2026))
    r = tenth.run(TRIALS["fast"])
    assert r.epsilon_lower > r.epsilon_claimed, r
    r = half.run(TRIALS["fast"])
    assert r.mu_lower > r.mu_claimed and not r.passed, r


def test_the_audit_catches_the_crafted_basis_without_the_sites_checks(plan, monkeypatch):
    """With the site's basis check switched off, the crafted basis reaches the whitening: NaN on D′
    only, and the audit reports it (the audit that would have caught issue 28)."""
    monkeypatch.setattr(ss_site, "basis_problem", lambda *args, **kwargs: None)
    case = crafted_basis_case(np.random.default_rng(2026), plan)
    r = case.run(TRIALS["site"])
    assert set(case.kinds[0]) == {"finite reply"} and set(case.kinds[1]) == {"non-finite reply"}, case.kinds
    assert not r.passed and r.fpr == 0.0 and r.fnr == 0.0, r


def test_the_outcome_statistic_tells_every_outcome_apart():
    stat = A.OutcomeStatistic(np.zeros(3), np.array([1.0, 0.0, 0.0]))
    refused = A.Outcome(None, "UnsafeMessageError: site-0.csv refused a basis")
    other = A.Outcome(None, "ValueError: something else")
    a, b = stat(refused), stat(other)
    assert a == stat(refused) and a != b and max(a, b) < -1e299
    assert stat(A.Outcome(np.array([np.nan, 0.0, 0.0]))) == np.inf
    assert stat(A.Outcome(np.array([1.0, 0.0]))) == np.inf  # another shape
    assert stat(A.Outcome(None)) == np.inf  # malformed
    assert stat(A.Outcome(np.array([2.0, 5.0, 5.0]))) == 2.0


def test_clopper_pearson_and_the_bounds():
    from scipy.stats import binom, norm

    # the upper bound covers: P(X <= k | p_up) = alpha
    up = A.clopper_pearson_upper(3, 100, 0.025)
    assert binom.cdf(3, 100, up) == pytest.approx(0.025, rel=1e-6)
    assert A.clopper_pearson_upper(100, 100, 0.025) == 1.0
    # no errors at all in n trials bounds ε by about ln(n / 3.7) at 95 %
    assert A.epsilon_lower_bound(0, 1000, 0, 1000, 1e-5) == pytest.approx(np.log((1 - 1e-5 - 0.00368) / 0.00368), rel=1e-2)
    # a useless test shows nothing
    assert A.epsilon_lower_bound(500, 1000, 500, 1000, 1e-5) == 0.0
    assert A.gdp_lower_bound(500, 1000, 500, 1000) == 0.0
    # the error rates of the best test of N(0, 1) against N(μ, 1), measured on 10⁷ trials, bound μ closely
    n, mu = 10**7, 0.5
    k = int(n * norm.cdf(-mu / 2))
    assert A.gdp_lower_bound(k, n, k, n) == pytest.approx(mu, abs=0.005)
    assert A.gdp_lower_bound(k, n, k, n) < mu
