"""Messages between participants and the coordinator, with their byte encoding.

Every message is a small frozen dataclass with ``encode() -> bytes`` and ``decode(bytes)``. The
encoded length is what the run report counts as communication, and the encoding is what a network
transport would send. Layout (little endian): a fixed header ``kind:u8, version:u8, round:u32,
sender:u32, d:u32, count:u32`` (18 bytes), then a message-specific payload. Indices are int32,
values float64. Matrices are sent either as sparse ``(i, j, value)`` triples (16 bytes each) or
dense row-major float64 (8·d² bytes), whichever is smaller (``format`` byte 0 = sparse, 1 = dense).

Orientation: a matrix entry ``(i, j)`` is the edge ``i → j``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = [
    "HEADER",
    "SparseEntries",
    "ConsensusBroadcast",
    "SparseUpdate",
    "DenseUpdate",
    "encode_matrix",
    "decode_matrix",
]

HEADER = struct.Struct("<BBIIII")
_VERSION = 1
_KIND_BROADCAST = 1
_KIND_SPARSE_UPDATE = 2
_KIND_DENSE_UPDATE = 3
_F64 = struct.Struct("<d")
_TRIPLE = np.dtype([("i", "<i4"), ("j", "<i4"), ("v", "<f8")])


@dataclass(frozen=True)
class SparseEntries:
    """Matrix entries as parallel arrays ``rows``, ``cols`` (int32) and ``values`` (float64)."""

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray

    @classmethod
    def from_dense(cls, A: np.ndarray) -> "SparseEntries":
        r, c = np.nonzero(A)
        return cls(r.astype(np.int32), c.astype(np.int32), A[r, c].astype(np.float64))

    @classmethod
    def empty(cls) -> "SparseEntries":
        return cls(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))

    def __len__(self) -> int:
        return int(self.rows.size)

    def apply_to(self, A: np.ndarray) -> None:
        """Write these entries into ``A`` in place."""
        A[self.rows, self.cols] = self.values

    def to_dense(self, d: int) -> np.ndarray:
        A = np.zeros((d, d))
        self.apply_to(A)
        return A


def _triples_bytes(e: SparseEntries) -> bytes:
    arr = np.empty(len(e), dtype=_TRIPLE)
    arr["i"], arr["j"], arr["v"] = e.rows, e.cols, e.values
    return arr.tobytes()


def _triples_from(buf: memoryview, count: int) -> SparseEntries:
    arr = np.frombuffer(buf[: count * _TRIPLE.itemsize], dtype=_TRIPLE)
    return SparseEntries(arr["i"].astype(np.int32), arr["j"].astype(np.int32), arr["v"].astype(np.float64))


def encode_matrix(A: np.ndarray, allow_sparse: bool = True) -> tuple[int, int, bytes]:
    """``(format, count, payload)``: sparse triples when that is smaller than dense (and allowed)."""
    d = A.shape[0]
    nnz = int(np.count_nonzero(A))
    if allow_sparse and nnz * _TRIPLE.itemsize < d * d * 8:
        return 0, nnz, _triples_bytes(SparseEntries.from_dense(A))
    return 1, d * d, np.ascontiguousarray(A, dtype="<f8").tobytes()


def decode_matrix(fmt: int, count: int, d: int, buf: memoryview) -> np.ndarray:
    if fmt == 0:
        return _triples_from(buf, count).to_dense(d)
    return np.frombuffer(buf[: d * d * 8], dtype="<f8").reshape(d, d).copy()


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

    def encode(self) -> bytes:
        fmt, count, payload = encode_matrix(self.W, allow_sparse=not self.dense_only)
        head = HEADER.pack(_KIND_BROADCAST, _VERSION, self.round, 0, self.d, count)
        flags = struct.pack("<BBd", fmt, int(self.stop), self.rho2)
        return head + flags + payload

    @classmethod
    def decode(cls, data: bytes) -> "ConsensusBroadcast":
        kind, _, rnd, _, d, count = HEADER.unpack_from(data, 0)
        assert kind == _KIND_BROADCAST, "not a broadcast"
        fmt, stop, rho2 = struct.unpack_from("<BBd", data, HEADER.size)
        W = decode_matrix(fmt, count, d, memoryview(data)[HEADER.size + 10 :])
        return cls(rnd, d, W, rho2, bool(stop), fmt == 1)


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

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_SPARSE_UPDATE, _VERSION, self.round, self.sender, self.d, len(self.entries))
        obj = b"\x00" if self.objective is None else b"\x01" + _F64.pack(self.objective)
        return head + obj + _triples_bytes(self.entries)

    @classmethod
    def decode(cls, data: bytes) -> "SparseUpdate":
        kind, _, rnd, sender, d, count = HEADER.unpack_from(data, 0)
        assert kind == _KIND_SPARSE_UPDATE, "not a sparse update"
        off = HEADER.size
        objective = None
        if data[off] == 1:
            objective = _F64.unpack_from(data, off + 1)[0]
            off += 9
        else:
            off += 1
        return cls(rnd, sender, d, _triples_from(memoryview(data)[off:], count), objective)


@dataclass(frozen=True)
class DenseUpdate:
    """Participant → server: the whole local matrix ``B_p`` (Fed-BNSL baseline), dense float64."""

    round: int
    sender: int
    d: int
    B: np.ndarray
    objective: Optional[float] = None

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_DENSE_UPDATE, _VERSION, self.round, self.sender, self.d, self.d * self.d)
        obj = b"\x00" if self.objective is None else b"\x01" + _F64.pack(self.objective)
        return head + obj + np.ascontiguousarray(self.B, dtype="<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "DenseUpdate":
        kind, _, rnd, sender, d, count = HEADER.unpack_from(data, 0)
        assert kind == _KIND_DENSE_UPDATE, "not a dense update"
        off = HEADER.size
        objective = None
        if data[off] == 1:
            objective = _F64.unpack_from(data, off + 1)[0]
            off += 9
        else:
            off += 1
        B = np.frombuffer(memoryview(data)[off : off + 8 * d * d], dtype="<f8").reshape(d, d).copy()
        return cls(rnd, sender, d, B, objective)
