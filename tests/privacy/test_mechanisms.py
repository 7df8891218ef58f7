"""The noise mechanisms: distributions checked statistically with fixed seeds."""

import numpy as np
import pytest
from scipy import stats

from bnsl_cli.privacy.mechanisms import (
    gaussian_noise,
    ColumnwiseSelector,
    gumbel_max_select,
    make_rng,
    project_psd,
    symmetric_gaussian_matrix,
)

# ---------------------------------------------------------------------------------------------
# Gumbel-max = exponential mechanism
# ---------------------------------------------------------------------------------------------


def _softmax(scores, scale):
    s = np.asarray(scores, dtype=float)
    w = np.where(np.isfinite(s), np.exp((s - s[np.isfinite(s)].max()) / scale), 0.0)
    return w / w.sum()


def _frequencies(scores, scale, n_draws, seed):
    rng = np.random.default_rng(seed)
    picks = np.fromiter((gumbel_max_select(scores, scale, rng) for _ in range(n_draws)), dtype=int)
    return np.bincount(picks, minlength=np.size(scores))


SCORES = np.array([[-np.inf, 0.3, 1.1], [0.0, -np.inf, 1.5], [0.9, 0.2, -np.inf]])  # diagonal masked
SCALE = 0.8
N_DRAWS = 24_000


@pytest.fixture(scope="module")
def counts():
    return _frequencies(SCORES, SCALE, N_DRAWS, seed=20240611)


def test_gumbel_max_matches_exponential_mechanism(counts):
    p = _softmax(SCORES.ravel(), SCALE)
    mask = p > 0
    assert counts[~mask].sum() == 0  # masked entries never selected
    chi2, pval = stats.chisquare(counts[mask], N_DRAWS * p[mask])
    assert pval > 1e-3, (chi2, pval)


def test_chi_square_has_power_against_a_wrong_scale(counts):
    """The statistical test above can fail: the same draws are rejected for a wrong temperature."""
    for wrong in (SCALE * 1.5, SCALE / 1.5):
        p = _softmax(SCORES.ravel(), wrong)
        mask = p > 0
        _, pval = stats.chisquare(counts[mask], N_DRAWS * p[mask])
        assert pval < 1e-6


def _columnwise_frequencies(scores, scale, n_draws, seed):
    sel = ColumnwiseSelector(scale, np.random.default_rng(seed))
    sel.set_scores(np.array(scores, dtype=float))
    counts = np.zeros(np.size(scores), dtype=int)
    for _ in range(n_draws):
        i, j = sel.select()
        counts[i * scores.shape[1] + j] += 1
    return counts


def test_columnwise_selector_matches_exponential_mechanism():
    counts = _columnwise_frequencies(SCORES, SCALE, N_DRAWS, seed=7)
    p = _softmax(SCORES.ravel(), SCALE)
    mask = p > 0
    assert counts[~mask].sum() == 0
    _, pval = stats.chisquare(counts[mask], N_DRAWS * p[mask])
    assert pval > 1e-3, pval
    for wrong in (SCALE * 1.5, SCALE / 1.5):  # the test has power
        q = _softmax(SCORES.ravel(), wrong)
        assert stats.chisquare(counts[mask], N_DRAWS * q[mask])[1] < 1e-6


def test_columnwise_selector_tracks_column_updates_and_zero_scale_is_argmax():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(5, 5))
    np.fill_diagonal(S, -np.inf)
    sel = ColumnwiseSelector(0.0, rng)
    sel.set_scores(S.copy())
    for _ in range(20):
        j = int(rng.integers(5))
        col = rng.normal(size=5) * 3
        col[j] = -np.inf
        S[:, j] = col
        sel.update_column(j, col)
        assert sel.select() == np.unravel_index(np.argmax(S), S.shape)
    # a large update in one column moves the mass there (the partitions are refreshed)
    big = np.full(5, -np.inf)
    big[0] = 1e3
    sel2 = ColumnwiseSelector(1.0, np.random.default_rng(1))
    sel2.set_scores(S.copy())
    sel2.update_column(3, big)
    assert all(sel2.select() == (0, 3) for _ in range(50))
    with pytest.raises(ValueError):
        ColumnwiseSelector(-1.0, rng)
    with pytest.raises(ValueError):
        ColumnwiseSelector(1.0, rng).set_scores(np.full((2, 2), -np.inf))


def test_gumbel_max_zero_scale_is_argmax():
    rng = np.random.default_rng(0)
    scores = np.array([[0.1, -np.inf], [2.0, 1.9]])
    for _ in range(20):
        assert gumbel_max_select(scores, 0.0, rng) == 2
    assert np.unravel_index(gumbel_max_select(scores, 0.0, rng), scores.shape) == (1, 0)


def test_gumbel_max_huge_scale_is_uniform_over_unmasked():
    scores = np.array([5.0, -np.inf, 0.0, -3.0])
    counts = _frequencies(scores, 1e9, 6000, seed=3)
    assert counts[1] == 0
    _, pval = stats.chisquare(counts[[0, 2, 3]])
    assert pval > 1e-3


def test_gumbel_max_stream_does_not_depend_on_scores():
    a = np.random.default_rng(11)
    b = np.random.default_rng(11)
    gumbel_max_select(np.zeros(10), 1.0, a)
    gumbel_max_select(np.arange(10.0), 1.0, b)
    assert a.random() == b.random()


@pytest.mark.parametrize(
    "scores, scale",
    [(np.array([1.0, np.nan]), 1.0), (np.array([1.0, np.inf]), 1.0), (np.full(3, -np.inf), 1.0),
     (np.array([]), 1.0), (np.array([1.0, 2.0]), -1.0)],
)
def test_gumbel_max_rejects_bad_input(scores, scale):
    with pytest.raises(ValueError):
        gumbel_max_select(scores, scale, np.random.default_rng(0))


# ---------------------------------------------------------------------------------------------
# Gaussian noise
# ---------------------------------------------------------------------------------------------


def test_gaussian_noise_has_requested_std():
    rng = np.random.default_rng(7)
    x = gaussian_noise((200_000,), 2.5, rng)
    assert x.shape == (200_000,)
    assert abs(x.mean()) < 5 * 2.5 / np.sqrt(x.size)
    assert x.std() == pytest.approx(2.5, rel=0.01)
    assert stats.kstest(x / 2.5, "norm").pvalue > 1e-3


def test_gaussian_noise_per_entry_std():
    rng = np.random.default_rng(8)
    std = np.array([0.5, 3.0, 0.0])
    x = gaussian_noise((100_000, 3), std, rng)
    assert x.std(axis=0) == pytest.approx([0.5, 3.0, 0.0], rel=0.02, abs=1e-12)
    assert np.all(x[:, 2] == 0)


def test_gaussian_noise_scalar_and_zero():
    rng = np.random.default_rng(9)
    v = gaussian_noise(None, 1.0, rng)
    assert isinstance(v, float)
    assert np.all(gaussian_noise(5, 0.0, rng) == 0)
    with pytest.raises(ValueError):
        gaussian_noise(3, -1.0, rng)


# ---------------------------------------------------------------------------------------------
# symmetric noise, PSD projection, clipping, rng
# ---------------------------------------------------------------------------------------------


def test_symmetric_gaussian_matrix():
    d, std = 300, 1.7
    rng = np.random.default_rng(10)
    E = symmetric_gaussian_matrix(d, std, rng)
    assert E.shape == (d, d)
    assert np.array_equal(E, E.T)
    iu = np.triu_indices(d, 1)
    assert E[iu].std() == pytest.approx(std, rel=0.02)
    assert np.diag(E).std() == pytest.approx(std, rel=0.15)
    assert abs(np.corrcoef(E[iu][:-1], E[iu][1:])[0, 1]) < 0.02  # independent draws
    # exactly d(d+1)/2 draws are consumed
    ref = np.random.default_rng(10)
    ref.normal(size=d * (d + 1) // 2)
    assert rng.random() == ref.random()


def test_project_psd():
    rng = np.random.default_rng(12)
    A = rng.normal(size=(30, 30))
    S = A + A.T
    P = project_psd(S)
    assert np.array_equal(P, P.T)
    assert np.linalg.eigvalsh(P).min() >= -1e-10
    # idempotent, and a PSD input is unchanged
    assert np.allclose(project_psd(P), P, atol=1e-10)
    G = A @ A.T
    assert np.allclose(project_psd(G), G, atol=1e-9)
    # nearest in Frobenius norm: the negative eigen-directions are removed
    assert np.allclose(project_psd(np.diag([1.0, -2.0, 3.0])), np.diag([1.0, 0.0, 3.0]))
    w, V = np.linalg.eigh(S)
    assert np.linalg.norm(S - P) == pytest.approx(np.sqrt(np.sum(np.minimum(w, 0) ** 2)), rel=1e-9)


def test_make_rng():
    a, seeded_a = make_rng(42)
    b, seeded_b = make_rng(42)
    assert seeded_a and seeded_b
    assert np.array_equal(a.normal(size=5), b.normal(size=5))
    c, seeded_c = make_rng(None)
    d, _ = make_rng(None)
    assert seeded_c is False
    assert not np.array_equal(c.normal(size=5), d.normal(size=5))  # OS entropy
    with pytest.raises(ValueError):
        make_rng(-1)


def test_one_auditable_sampler_draws_all_dp_noise():
    """Issue 12.7: every DP noise draw goes through mechanisms.sample_noise (an audit finds one place)."""
    import ast
    from pathlib import Path

    import bnsl_cli

    samplers = {"normal", "standard_normal", "gumbel", "laplace", "exponential", "uniform", "random", "integers"}
    root = Path(bnsl_cli.__file__).parent
    found = []
    for sub in ("privacy", "federated"):
        for path in (root / sub).rglob("*.py"):
            tree = ast.parse(path.read_text())
            allowed = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name == "sample_noise" and path.name == "mechanisms.py":
                    allowed |= {id(n) for n in ast.walk(node)}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in samplers and id(node) not in allowed):
                    found.append(f"{path.name}:{node.lineno} .{node.func.attr}(")
    assert not found, found
    from bnsl_cli.privacy.mechanisms import sample_noise

    rng = np.random.default_rng(0)
    z = sample_noise(rng, "normal", 20000)
    g = sample_noise(rng, "gumbel", 20000)
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert abs(g.mean() - 0.5772) < 0.03  # the Euler–Mascheroni constant
    with pytest.raises(ValueError):
        sample_noise(rng, "laplace", 3)
