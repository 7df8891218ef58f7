import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bnsl_cli.federated.messages import (
    HEADER,
    ConsensusBroadcast,
    DenseUpdate,
    SparseEntries,
    SparseUpdate,
    SupportState,
)


def _sparse_matrix(d, density, seed):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d)) * (rng.random((d, d)) < density)
    np.fill_diagonal(A, 0)
    return A


@given(st.integers(2, 40), st.floats(0, 1), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_broadcast_round_trip_and_smallest_format(d, density, seed):
    A = _sparse_matrix(d, density, seed)
    msg = ConsensusBroadcast(3, d, A, 0.125)
    data = msg.encode()
    back = ConsensusBroadcast.decode(data)
    assert np.array_equal(back.W, A) and back.rho2 == 0.125 and back.round == 3
    nnz = np.count_nonzero(A)
    assert len(data) == HEADER.size + 10 + min(12 * nnz, 8 * d * d)


def test_support_delta_sequence_is_lossless_and_smaller():
    d = 30
    enc, dec = SupportState(), SupportState()
    rng = np.random.default_rng(1)
    A = _sparse_matrix(d, 0.1, 0)
    sizes = []
    for r in range(6):
        A = A + (A != 0) * rng.normal(scale=0.01, size=A.shape)  # values move, support stays
        if r == 3:
            A[0, 5], A[7, 2] = 0.0, 0.5  # one entry leaves, one joins
        data = ConsensusBroadcast(r, d, A, 1.0).encode(enc)
        sizes.append(len(data))
        assert np.array_equal(ConsensusBroadcast.decode(data, dec).W, A)
    pairs = HEADER.size + 10 + 12 * np.count_nonzero(A)
    assert sizes[-1] < pairs


@given(st.integers(2, 30), st.integers(0, 50), st.integers(0, 1000), st.booleans())
@settings(max_examples=40, deadline=None)
def test_updates_round_trip(d, k, seed, with_objective):
    rng = np.random.default_rng(seed)
    k = min(k, d * d)
    flat = rng.choice(d * d, size=k, replace=False)
    e = SparseEntries((flat // d).astype(np.int32), (flat % d).astype(np.int32), rng.normal(size=k))
    obj = float(rng.normal()) if with_objective else None
    data = SparseUpdate(2, 5, d, e, obj).encode()
    back = SparseUpdate.decode(data)
    assert back.sender == 5 and back.objective == obj
    assert np.array_equal(back.entries.to_dense(d), e.to_dense(d))
    assert len(data) == HEADER.size + (9 if with_objective else 1) + 12 * k
    B = rng.normal(size=(d, d))
    dense = DenseUpdate(2, 1, d, B, obj).encode()
    assert np.array_equal(DenseUpdate.decode(dense).B, B)
    assert len(dense) == HEADER.size + (9 if with_objective else 1) + 8 * d * d
