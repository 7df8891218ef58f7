"""PGCD's fast paths give the doubles of the plain definitions, bit for bit.

The solver runs on transposed buffers with in-place ufuncs, builds the CSR product's arrays itself
and takes ``S B`` from its caller; none of that may move a last digit. The references here are the
straightforward forms: PGCD column by column in the layout of the math, the product through scipy's
COO → CSR route, the site recomputing ``S B_p`` whenever it needs it.
"""

import numpy as np
import pytest
import scipy.sparse

from bnsl_cli.federated.messages import ConsensusBroadcast
from bnsl_cli.federated.methods.admm.local_step import sparse_step
from bnsl_cli.federated.methods.admm.site import SparseParticipant
from bnsl_cli.solvers.pgcd import local_objective, pgcd, smooth_gradient, times_sparse


def reference_product(S, B):
    """``S @ B``: dense below d = 64 or past 1/8 non-zeros, else ``(Bᵀ S)ᵀ`` on a COO-built CSR ``Bᵀ``."""
    d = B.shape[0]
    if d < 64 or np.count_nonzero(B) * 8 > d * d:
        return S @ B
    r, c = np.nonzero(B.T)
    Bt = scipy.sparse.csr_matrix((B.T[r, c], (r, c)), shape=(d, d))
    return np.ascontiguousarray((Bt @ S).T)


def reference_pgcd(S, B, beta, W, rho2, lam, max_steps, tol, forbidden=None, required=None):
    """PGCD as the module docstring states it: the candidates ``ST_τ(B − G/M) − B`` with their scores,
    then per step the best one applied, column ``n`` of ``G`` updated and its candidates refreshed as
    ``−g/M − clip(b − g/M, −τ, τ)``. Returns ``(B, G, steps, max |candidate|)``."""
    d = S.shape[0]
    B = np.array(B, dtype=float)
    G = reference_product(S, B) - S + beta + rho2 * (B - W)
    M = np.diag(S) + rho2
    inv_m, sqrt_m = 1.0 / M, np.sqrt(M)
    tau = np.repeat((lam * inv_m)[:, None], d, axis=1)
    if required is not None:
        tau[required] = 0.0
    x = B - G * inv_m[:, None]
    cand = np.sign(x) * np.maximum(np.abs(x) - tau, 0.0) - B
    np.fill_diagonal(cand, 0.0)
    if forbidden is not None:
        cand[forbidden] = 0.0
    score = np.abs(cand) * sqrt_m[:, None]
    best_row, best = score.argmax(axis=0), score.max(axis=0)
    steps = 0
    for _ in range(max_steps):
        n = int(np.argmax(best))
        if best[n] <= tol * sqrt_m.min():
            break
        m = int(best_row[n])
        delta = cand[m, n]
        B[m, n] += delta
        G[:, n] += delta * S[:, m]
        G[m, n] += rho2 * delta
        steps += 1
        t = G[:, n] * inv_m
        cand[:, n] = -(t + np.minimum(np.maximum(B[:, n] - t, -tau[:, n]), tau[:, n]))
        cand[n, n] = 0.0
        if forbidden is not None:
            cand[forbidden[:, n], n] = 0.0
        s = np.abs(cand[:, n]) * sqrt_m
        best_row[n] = np.argmax(s)
        best[n] = s[best_row[n]]
    return B, G, steps, (float(np.abs(cand).max()) if d > 1 else 0.0)


def _problem(d, seed, density=0.05, zero_cols=0, rows=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows or 4 * d, d)) * rng.uniform(0.3, 3.0, size=d)
    X[:, :zero_cols] = 0.0  # constant columns: S has zero rows and columns, M_ii = ρ₂
    S = X.T @ X / X.shape[0]
    B = rng.normal(size=(d, d)) * (rng.random((d, d)) < density)
    np.fill_diagonal(B, 0.0)
    beta = 0.05 * rng.normal(size=(d, d))
    W = 0.3 * rng.normal(size=(d, d)) * (rng.random((d, d)) < 0.2)
    return rng, S, B, beta, W


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


CASES = [
    # d, seed, density of the start, zero columns, lam, rho2, steps, tol, masks
    (1, 0, 0.0, 0, 0.1, 0.5, 10, 1e-8, None),
    (2, 1, 0.0, 0, 0.0, 0.5, 10, 0.0, None),
    (6, 2, 0.3, 1, 0.05, 0.2, 200, 0.0, None),
    (12, 3, 0.1, 2, 0.02, 1e-3, 500, 1e-9, "both"),
    (30, 4, 0.05, 0, 0.01, 0.05, 90, 1e-5, "forbidden"),
    (70, 5, 0.02, 3, 0.01, 0.01, 400, 1e-6, None),  # the sparse product
    (70, 6, 0.5, 0, 0.02, 0.1, 300, 1e-6, "required"),  # dense B: the BLAS product
    (90, 7, 0.0, 0, 0.005, 1e-3, 600, 1e-5, "both"),
    (120, 8, 0.03, 5, 0.0, 0.3, 0, 1e-5, None),  # no step
    (120, 9, 0.03, 0, 0.01, 0.3, 5000, 1e-3, None),  # stops on tol
]


@pytest.mark.parametrize("d,seed,density,zero_cols,lam,rho2,steps,tol,masks", CASES)
def test_pgcd_equals_the_reference_bit_for_bit(d, seed, density, zero_cols, lam, rho2, steps, tol, masks):
    rng, S, B, beta, W = _problem(d, seed, density, zero_cols)
    forbidden = required = None
    if masks in ("forbidden", "both"):
        forbidden = rng.random((d, d)) < 0.3
    if masks in ("required", "both"):
        required = rng.random((d, d)) < 0.1
        if forbidden is not None:
            required &= ~forbidden
    B_ref, G_ref, steps_ref, max_ref = reference_pgcd(S, B, beta, W, rho2, lam, steps, tol, forbidden, required)
    B0 = B.copy()
    for SB in (None, times_sparse(S, B)):
        res = pgcd(S, B, beta, W, rho2, lam, steps, tol, forbidden=forbidden, required=required, SB=SB)
        assert _same(B, B0)  # the start is not modified
        assert _same(res.B, B_ref) and _same(res.G, G_ref)
        assert res.steps == steps_ref and res.max_step == max_ref
        assert np.array_equal(res.changed, B_ref != B0)
        assert res.B.flags.c_contiguous  # its ℓ₁ norm and ⟨S, B⟩ are summed in this order
        if forbidden is not None:
            assert np.all(res.B[forbidden] == B0[forbidden])
    if steps >= 200 and tol == 0.0:
        assert steps_ref > 0


@pytest.mark.parametrize("d,density", [(5, 0.3), (63, 0.1), (64, 0.0), (64, 0.124), (64, 0.13), (100, 0.02), (150, 0.3)])
def test_times_sparse_equals_the_coo_route_bit_for_bit(d, density):
    rng, S, B, beta, W = _problem(d, d, density)
    B[rng.random((d, d)) < 0.02] = -0.0  # negative zeros are zeros of the product, as np.nonzero says
    B[:, 1] = 0.0  # an empty column: an empty CSR row
    if d > 3:
        B[2, :] = 0.5
    ref = reference_product(S, B)
    out = times_sparse(S, B)
    assert _same(out, ref) and out.flags.c_contiguous
    assert _same(smooth_gradient(S, B, beta, W, 0.3), ref - S + beta + 0.3 * (B - W))
    assert _same(smooth_gradient(S, B, beta, W, 0.3, SB=out), smooth_gradient(S, B, beta, W, 0.3))
    assert local_objective(S, B, beta, W, 0.3, 0.01, SB=out) == local_objective(S, B, beta, W, 0.3, 0.01)


def test_sparse_step_passes_the_product_on():
    _, S, B, beta, W = _problem(80, 11, 0.02)
    a, ea = sparse_step(S, B, beta, W, 0.1, 0.01, 300, 1e-6)
    b, eb = sparse_step(S, B, beta, W, 0.1, 0.01, 300, 1e-6, SB=times_sparse(S, B))
    assert _same(a.B, b.B) and _same(ea.rows, eb.rows) and _same(ea.cols, eb.cols) and _same(ea.values, eb.values)


class _Recomputing(SparseParticipant):
    """The reference site: forms ``S B_p`` afresh wherever it is needed."""

    def _product(self):
        return times_sparse(self._S, self.B)


@pytest.mark.parametrize("d", [10, 70])
def test_the_site_reusing_its_product_answers_byte_for_byte_as_one_recomputing_it(d):
    rng = np.random.default_rng(d)
    X = rng.normal(size=(200, d))
    X[:, 1:] += 0.8 * X[:, :-1]
    kw = {"pid": 0, "X": X, "n_total": 600, "lam": 0.01, "steps": 3 * d, "tol": 1e-5}
    fast, slow = SparseParticipant(**kw), _Recomputing(**kw)
    W = np.zeros((d, d))
    rho2 = 1e-3
    for rnd in range(1, 7):
        msg = ConsensusBroadcast(rnd, d, W, rho2).encode()
        a, b = fast.handle(msg), slow.handle(msg)
        assert a == b
        assert fast.objective() == slow.objective()
        # the next W: the sites' B, thresholded, as a coordinator's consensus might look
        W = np.where(np.abs(fast.B) > 0.05, fast.B, 0.0)
        rho2 *= 2.0
    assert fast.steps_taken == slow.steps_taken > 0
    assert _same(fast.B, slow.B) and _same(fast.beta, slow.beta)
    # a B_p set from outside is not served a stale product
    fast.B = fast.B * 0.5
    slow.B = slow.B * 0.5
    assert fast.objective() == slow.objective()
