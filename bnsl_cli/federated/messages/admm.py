"""The ADMM methods' messages: the consensus broadcast, the sparse and dense updates, and the
polish's second-moment request and reply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from bnsl_cli.federated.messages.wire import (
    declare,
    _BROADCAST_FLAGS,
    _F64,
    _KIND_BROADCAST,
    _KIND_DENSE_UPDATE,
    _KIND_GRAM_REPLY,
    _KIND_GRAM_REQUEST,
    _KIND_SPARSE_UPDATE,
    _PAIR,
    _VERSION,
    HEADER,
    MessageKind,
    ReplyShape,
    SparseEntries,
    SupportState,
    _header,
    _pairs_bytes,
    _pairs_from,
    decode_matrix,
    encode_matrix,
    is_stop,
)


@dataclass(frozen=True)
class ConsensusBroadcast:
    """Server → participant: the consensus ``W`` (sparse or dense) and the penalty ``ρ₂`` to use.

    ``dense_only`` forces the dense encoding (the Fed-BNSL baseline sends dense matrices).
    """

    round: int
    d: int
    W: np.ndarray
    rho2: float
    stop: bool = False
    dense_only: bool = False

    kind = _KIND_BROADCAST
    #: answered by the participant's update; the stop broadcast needs no reply
    reply = ReplyShape((MessageKind.SPARSE_UPDATE, MessageKind.DENSE_UPDATE), needs_reply=lambda data: not is_stop(data),
                       unneeded="replied to the stop broadcast")

    def encode(self, state: Optional[SupportState] = None) -> bytes:
        fmt, count, payload = encode_matrix(self.W, allow_sparse=not self.dense_only, state=state)
        head = HEADER.pack(_KIND_BROADCAST, _VERSION, self.round, 0, self.d, count)
        flags = _BROADCAST_FLAGS.pack(fmt, int(self.stop), self.rho2)
        return head + flags + payload

    @classmethod
    def decode(cls, data: bytes, state: Optional[SupportState] = None) -> "ConsensusBroadcast":
        rnd, _, d, count = _header(data, _KIND_BROADCAST, "broadcast")
        if len(data) < HEADER.size + _BROADCAST_FLAGS.size:
            raise ValueError("a broadcast shorter than its flags")
        fmt, stop, rho2 = _BROADCAST_FLAGS.unpack_from(data, HEADER.size)
        if stop not in (0, 1):
            raise ValueError(f"a broadcast with stop flag {stop}")
        W = decode_matrix(fmt, count, d, memoryview(data)[HEADER.size + _BROADCAST_FLAGS.size :], state)
        return cls(rnd, d, W, rho2, bool(stop), fmt == 1)


def _pack_objective(objective: Optional[float]) -> bytes:
    """Flag byte, then the float64 objective when present (non-private runs only)."""
    return b"\x00" if objective is None else b"\x01" + _F64.pack(objective)


def _unpack_objective(data: bytes, off: int) -> tuple[Optional[float], int]:
    if data[off] == 1:
        return _F64.unpack_from(data, off + 1)[0], off + 9
    return None, off + 1


def _update_payload(reply: bytes, d: int, count: int, kind: int):
    """``(values, objective)`` of a sparse or dense update's payload, or why it is malformed."""
    body = len(reply) - HEADER.size
    objective = None
    flag = reply[HEADER.size]
    if flag not in (0, 1):
        return "sent a message with a malformed objective field"
    if flag == 1 and body >= 9:
        objective = np.frombuffer(reply, dtype="<f8", count=1, offset=HEADER.size + 1)
    body -= 1 + 8 * flag
    if kind == MessageKind.SPARSE_UPDATE:
        if body != 12 * count:
            return f"sent a sparse update of {body} payload bytes for {count} entries (malformed)"
        arr = np.frombuffer(memoryview(reply)[len(reply) - body:], dtype=_PAIR)
        if count and (arr["k"].min() < 0 or arr["k"].max() >= d * d):
            return "sent a sparse update naming an entry outside the d × d matrix"
        k = arr["k"]
        # honest updates list their entries in increasing index order (the fast check)
        if count > 1 and not bool(np.all(k[1:] > k[:-1])) and np.unique(k).size != count:
            return "sent a sparse update naming an entry twice"
        return arr["v"], objective
    if count != d * d or body != 8 * d * d:
        return f"sent a dense update of {body} payload bytes for d = {d} (malformed)"
    return np.frombuffer(reply, dtype="<f8", offset=len(reply) - body), objective


@dataclass(frozen=True)
class SparseUpdate:
    """Participant → server: the entries of ``B_p`` that changed this round, as ``(i, j, value)``.

    ``objective`` is the participant's local objective value (non-private runs only; ``None``
    under DP, where it is not sent because it is not a privatised release).
    """

    round: int
    sender: int
    d: int
    entries: SparseEntries
    objective: Optional[float] = None

    kind = _KIND_SPARSE_UPDATE
    what = "sparse update"

    @staticmethod
    def payload(reply: bytes, d: int, count: int, due: Optional[int]):
        return _update_payload(reply, d, count, MessageKind.SPARSE_UPDATE)

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_SPARSE_UPDATE, _VERSION, self.round, self.sender, self.d, len(self.entries))
        obj = _pack_objective(self.objective)
        return head + obj + _pairs_bytes(self.entries, self.d)

    @classmethod
    def decode(cls, data: bytes) -> "SparseUpdate":
        rnd, sender, d, count = _header(data, _KIND_SPARSE_UPDATE, "sparse update")
        objective, off = _unpack_objective(data, HEADER.size)
        return cls(rnd, sender, d, _pairs_from(memoryview(data)[off:], count, d), objective)


@dataclass(frozen=True)
class DenseUpdate:
    """Participant → server: the whole local matrix ``B_p`` (Fed-BNSL baseline), dense float64."""

    round: int
    sender: int
    d: int
    B: np.ndarray
    objective: Optional[float] = None

    kind = _KIND_DENSE_UPDATE
    what = "dense update"

    @staticmethod
    def payload(reply: bytes, d: int, count: int, due: Optional[int]):
        return _update_payload(reply, d, count, MessageKind.DENSE_UPDATE)

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_DENSE_UPDATE, _VERSION, self.round, self.sender, self.d, self.d * self.d)
        obj = _pack_objective(self.objective)
        return head + obj + np.ascontiguousarray(self.B, dtype="<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "DenseUpdate":
        rnd, sender, d, count = _header(data, _KIND_DENSE_UPDATE, "dense update")
        objective, off = _unpack_objective(data, HEADER.size)
        B = np.frombuffer(memoryview(data)[off : off + 8 * d * d], dtype="<f8").reshape(d, d).copy()
        return cls(rnd, sender, d, B, objective)


@dataclass(frozen=True)
class GramRequest:
    """Server → participant (once, after the ADMM rounds, for the polish): the second moments
    ``(a, b)`` wanted, as flat indices ``a·d + b`` (int32, ``a ≤ b``), chosen from the consensus."""

    round: int
    d: int
    pairs: np.ndarray

    kind = _KIND_GRAM_REQUEST
    #: answered by the requested second moments, one per pair
    reply = ReplyShape((MessageKind.GRAM_REPLY,), due=lambda d, count: count)

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_GRAM_REQUEST, _VERSION, self.round, 0, self.d, int(self.pairs.size))
        return head + np.asarray(self.pairs, dtype="<i4").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "GramRequest":
        rnd, _, d, count = _header(data, _KIND_GRAM_REQUEST, "second-moment request")
        if len(data) != HEADER.size + 4 * count:
            raise ValueError(f"a second-moment request of {len(data)} bytes for {count} pairs")
        pairs = np.frombuffer(data, dtype="<i4", count=count, offset=HEADER.size).astype(np.int64)
        return cls(rnd, d, pairs)


@dataclass(frozen=True)
class GramReply:
    """Participant → server: its share ``Σ_rows x_a x_b / n`` of each requested second moment, in the
    request's order (float64; under DP a noisy clipped sum, see the privacy report)."""

    round: int
    sender: int
    d: int
    values: np.ndarray

    kind = _KIND_GRAM_REPLY
    what = "second-moment reply"

    @staticmethod
    def payload(reply: bytes, d: int, count: int, due: Optional[int]):
        body = len(reply) - HEADER.size
        if count != due or body != 8 * count:
            return f"sent {count} second moments ({body} bytes) for {due} requested (malformed)"
        return np.frombuffer(reply, dtype="<f8", offset=HEADER.size), None

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_GRAM_REPLY, _VERSION, self.round, self.sender, self.d, int(self.values.size))
        return head + np.asarray(self.values, dtype="<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "GramReply":
        rnd, sender, d, count = _header(data, _KIND_GRAM_REPLY, "second-moment reply")
        values = np.frombuffer(data, dtype="<f8", count=count, offset=HEADER.size).copy()
        return cls(rnd, sender, d, values)


declare(ConsensusBroadcast, SparseUpdate, DenseUpdate, GramRequest, GramReply)
