import numpy as np
import pytest

from bnsl_cli.solvers.pgcd import local_objective, pgcd, smooth_gradient, soft_threshold


def _problem(d=8, seed=0, rho2=0.05, lam=0.02):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, d)) @ rng.normal(size=(d, d))
    X -= X.mean(axis=0)
    S = X.T @ X / 1600.0
    beta = rng.normal(scale=0.05, size=(d, d))
    np.fill_diagonal(beta, 0)
    W = rng.normal(scale=0.3, size=(d, d))
    np.fill_diagonal(W, 0)
    return S, beta, W, rho2, lam


def _ista(S, beta, W, rho2, lam, iters=20000):
    """Independent solver: proximal gradient with step 1/L on the same objective (diagonal fixed at 0)."""
    d = S.shape[0]
    L = np.linalg.eigvalsh(S).max() + rho2
    B = np.zeros((d, d))
    off = ~np.eye(d, dtype=bool)
    for _ in range(iters):
        G = S @ B - S + beta + rho2 * (B - W)
        B_new = soft_threshold(B - G / L, lam / L) * off
        if np.max(np.abs(B_new - B)) < 1e-14:
            B = B_new
            break
        B = B_new
    return B


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pgcd_reaches_the_proximal_gradient_optimum(seed):
    S, beta, W, rho2, lam = _problem(seed=seed)
    res = pgcd(S, np.zeros_like(S), beta, W, rho2, lam, max_steps=20000, tol=1e-13)
    ref = _ista(S, beta, W, rho2, lam)
    assert np.max(np.abs(res.B - ref)) < 1e-6
    assert np.all(np.diag(res.B) == 0)


def test_incremental_gradient_equals_full_recomputation_after_many_steps():
    S, beta, W, rho2, lam = _problem(d=12, seed=3)
    res = pgcd(S, np.zeros_like(S), beta, W, rho2, lam, max_steps=3000, tol=0.0)
    assert res.steps > 1000
    np.testing.assert_allclose(res.G, smooth_gradient(S, res.B, beta, W, rho2), atol=1e-10, rtol=0)


def test_every_step_decreases_the_objective_and_changed_marks_the_moves():
    S, beta, W, rho2, lam = _problem(d=6, seed=4)
    B = np.zeros_like(S)
    values = [local_objective(S, B, beta, W, rho2, lam)]
    for _ in range(30):
        res = pgcd(S, B, beta, W, rho2, lam, max_steps=1)
        assert np.array_equal(res.changed, res.B != B)
        B = res.B
        values.append(local_objective(S, B, beta, W, rho2, lam))
    assert all(b <= a + 1e-15 for a, b in zip(values, values[1:]))
    assert values[-1] < values[0]


def test_at_most_t_coordinates_change_and_tolerance_stops_early():
    S, beta, W, rho2, lam = _problem(d=10, seed=5)
    res = pgcd(S, np.zeros_like(S), beta, W, rho2, lam, max_steps=7)
    assert res.changed.sum() <= 7
    done = pgcd(S, np.zeros_like(S), beta, W, rho2, lam, max_steps=100000, tol=1e-9)
    assert done.steps < 100000 and done.max_step < 1e-9


def test_default_lambda_keeps_the_total_l1_fixed_over_the_number_of_sites():
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    def plan(P, **kw):
        shapes = Shapes(("a", "b", "c"), tuple(ParticipantShape(f"p{k}", 100) for k in range(P)))
        return RunPlan.resolve(LearnConfig(**kw), shapes)

    assert plan(8).lam == pytest.approx(0.005)
    assert plan(200).lam * 200 == pytest.approx(plan(8).lam * 8)
    assert plan(3, lam=0.02).lam == 0.02  # a given λ is used as given
    assert plan(200, method="fed-sparse", dp=DPConfig(epsilon=5.0)).lam == pytest.approx(0.01)  # private runs keep theirs
    assert plan(8).threshold == 0.3 and not plan(8).threshold_given
    assert plan(8, threshold=0.3).threshold_given
