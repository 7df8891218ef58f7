import numpy as np
import pytest

pytest.importorskip("cryptography")

from bnsl_cli.federated.secure_sum import (  # noqa: E402
    SecureSum, SecureSumRangeError, decode_sum, encode_fixed, generate_keypair, unmask_sum,
)


def _sites(P, run_id=b"run-1", bits=32):
    keys = [generate_keypair() for _ in range(P)]
    pubs = [pk for _, pk in keys]
    return [SecureSum(i, sk, pubs, run_id, bits) for i, (sk, _) in enumerate(keys)]


@pytest.mark.parametrize("P", [2, 3, 8])
def test_masks_cancel_and_sum_is_exact_to_rounding(P):
    rng = np.random.default_rng(P)
    vals = [rng.normal(scale=5.0, size=257) for _ in range(P)]
    sites = _sites(P)
    masked = [s.mask(v, b"gram:r7") for s, v in zip(sites, vals)]
    got = unmask_sum(masked)
    want = np.sum(vals, axis=0)
    assert np.max(np.abs(got - want)) <= P * 2.0 ** -33 + 1e-15
    # nothing is learnt from one masked vector: it is far from the fixed-point value it hides
    q = encode_fixed(vals[0], 32, P)
    assert np.mean(masked[0] == q) < 0.01
    # a missing site leaves the masks uncancelled (no dropout recovery)
    partial = unmask_sum(masked[:-1])
    assert np.max(np.abs(partial - np.sum(vals[:-1], axis=0))) > 1.0


def test_masks_look_uniform():
    sites = _sites(3)
    y = sites[0].mask(np.zeros(20000), b"t")
    top = (y >> np.uint64(56)).astype(np.int64)  # top byte: uniform on 0..255 if the mask is
    counts = np.bincount(top, minlength=256)
    chi2 = float(((counts - 20000 / 256) ** 2 / (20000 / 256)).sum())
    assert chi2 < 400  # 255 dof: mean 255, sd ≈ 22.6


def test_negative_values_and_wraparound():
    sites = _sites(4)
    vals = [np.array([-1.5, 3.25, -1e6]), np.array([0.5, -3.25, 2e6]), np.array([1.0, 0.0, -1e6]), np.zeros(3)]
    got = unmask_sum([s.mask(v, b"x") for s, v in zip(sites, vals)])
    np.testing.assert_allclose(got, [0.0, 0.0, 0.0], atol=1e-8)


def test_different_tags_and_runs_give_different_masks():
    keys = [generate_keypair() for _ in range(2)]
    pubs = [pk for _, pk in keys]
    a = SecureSum(0, keys[0][0], pubs, b"run-a")
    b = SecureSum(0, keys[0][0], pubs, b"run-b")
    z = np.zeros(8)
    assert not np.array_equal(a.mask(z, b"t1"), a.mask(z, b"t2"))
    assert not np.array_equal(SecureSum(0, keys[0][0], pubs, b"run-a").mask(z, b"t1"), b.mask(z, b"t1"))


def test_tag_reuse_refused():
    s = _sites(2)[0]
    s.mask(np.zeros(3), b"t")
    with pytest.raises(ValueError, match="used twice"):
        s.mask(np.zeros(3), b"t")


def test_range_checks():
    s = _sites(8)[0]
    with pytest.raises(SecureSumRangeError, match="fixed-point range"):
        s.mask(np.array([2.0 ** 31 / 8]), b"big")
    with pytest.raises(SecureSumRangeError, match="not finite"):
        s.mask(np.array([np.nan]), b"nan")
    # just inside the range is fine and round-trips
    v = np.array([2.0 ** 31 / 8 - 1.0])
    np.testing.assert_allclose(decode_sum(encode_fixed(v, 32, 8), 32), v)


def test_wrong_key_does_not_cancel():
    keys = [generate_keypair() for _ in range(3)]
    pubs = [pk for _, pk in keys]
    bad = list(pubs)
    bad[1] = generate_keypair()[1]  # site 0 was given a substituted key for site 1
    sites = [SecureSum(0, keys[0][0], bad, b"r")] + [SecureSum(i, keys[i][0], pubs, b"r") for i in (1, 2)]
    got = unmask_sum([s.mask(np.ones(5), b"t") for s in sites])
    assert np.max(np.abs(got - 3.0)) > 1.0
