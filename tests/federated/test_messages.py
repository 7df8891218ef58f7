import numpy as np
import pytest
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
        msg = ConsensusBroadcast(r, d, A, 1.0)
        data = msg.encode(enc)
        assert msg.encode(enc) == data  # encoding does not move the sender's state
        enc.advance(A)
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


def test_encoding_does_not_mutate_the_shared_state():
    """Issue 12.18: encode() advanced the sender's support state, so a second encoding of the same
    broadcast (a retry, another receiver) produced different bytes."""
    d = 12
    A = _sparse_matrix(d, 0.2, 3)
    state = SupportState()
    state.advance(A)
    before = state.support.copy()
    B = A.copy()
    B[0, 1] = 0.7
    first = ConsensusBroadcast(2, d, B, 1.0).encode(state)
    assert np.array_equal(state.support, before)
    assert ConsensusBroadcast(2, d, B, 1.0).encode(state) == first
    receiver = SupportState(before.copy())
    assert np.array_equal(ConsensusBroadcast.decode(first, receiver).W, B)


def test_decoders_check_the_version_byte():
    d = 4
    e = SparseEntries(np.array([0], np.int32), np.array([1], np.int32), np.array([0.5]))
    msgs = [
        (ConsensusBroadcast(1, d, np.eye(d), 1.0).encode(), ConsensusBroadcast.decode),
        (SparseUpdate(1, 0, d, e, None).encode(), SparseUpdate.decode),
        (DenseUpdate(1, 0, d, np.eye(d), None).encode(), DenseUpdate.decode),
    ]
    for data, decode in msgs:
        decode(data)
        bad = bytearray(data)
        bad[1] = 2  # the version byte
        with pytest.raises(ValueError, match="version"):
            decode(bytes(bad))
        with pytest.raises(ValueError):
            decode(data[:5])


@given(st.integers(2, 25), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 10_000)), min_size=1, max_size=6))
@settings(max_examples=40, deadline=None)
def test_support_delta_sequences_of_random_supports_are_lossless(d, steps):
    """Supports that grow, shrink and are replaced between broadcasts: every decode is exact and
    both ends hold the same support (the set arithmetic of the delta format, done with masks)."""
    enc, dec = SupportState(), SupportState()
    for r, (density, seed) in enumerate(steps):
        A = _sparse_matrix(d, density, seed)
        data = ConsensusBroadcast(r, d, A, 1.0).encode(enc)
        enc.advance(A)
        assert np.array_equal(ConsensusBroadcast.decode(data, dec).W, A)
        assert np.array_equal(dec.support, enc.support)
        assert np.array_equal(enc.support, np.flatnonzero(A.ravel()))
