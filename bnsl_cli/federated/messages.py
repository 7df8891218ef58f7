"""Messages between participants and the coordinator, with their byte encoding.

Every message is a small frozen dataclass with ``encode() -> bytes`` and ``decode(bytes)``. The
encoded length is what the run report counts as communication, and the encoding is what a network
transport would send. Layout (little endian): a fixed header ``kind:u8, version:u8, round:u32,
sender:u32, d:u32, count:u32`` (18 bytes), then a message-specific payload. Indices are int32,
values float64. A matrix entry ``(i, j)`` is addressed by its flat row-major index ``i·d + j``
(one int32). Matrices travel in one of three formats, whichever is smallest:

- 0, sparse: ``(index:int32, value:float64)`` pairs, 12 bytes per non-zero;
- 1, dense: row-major float64, 8·d² bytes;
- 2, support delta (broadcasts only): both ends remember the support of the previous broadcast;
  the message lists the indices that joined and left it (int32 each) and then the values on the
  new support in index order (8 bytes each). Between ADMM rounds the support of W barely moves,
  so this halves the downlink against pairs without losing a bit.

Orientation: a matrix entry ``(i, j)`` is the edge ``i → j``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

__all__ = [
    "BasisBroadcast",
    "FirstRequest",
    "HEADER",
    "MessageKind",
    "Header",
    "read_header",
    "is_stop",
    "SUMMABLE_KINDS",
    "summable_span",
    "REPLY_VALUE_LIMIT",
    "validate_reply",
    "with_sender",
    "same_but_sender",
    "SparseEntries",
    "SupportState",
    "ConsensusBroadcast",
    "SparseUpdate",
    "DenseUpdate",
    "GramRequest",
    "GramReply",
    "message_kind",
    "encode_matrix",
    "decode_matrix",
    "StatsRequest",
    "StandardizeBroadcast",
    "MomentRequest",
    "ShareReply",
    "CentreBroadcast",
    "CentreRequest",
    "CENTRE_ROUND",
]

HEADER = struct.Struct("<BBIIII")
_VERSION = 1


class MessageKind(enum.IntEnum):
    """The kind byte of every protocol message (the first byte of its header). The numbers are the
    wire format: they never change, new kinds are appended."""

    BROADCAST = 1  #: :class:`ConsensusBroadcast`
    SPARSE_UPDATE = 2  #: :class:`SparseUpdate`
    DENSE_UPDATE = 3  #: :class:`DenseUpdate`
    GRAM_REQUEST = 4  #: :class:`GramRequest`
    GRAM_REPLY = 5  #: :class:`GramReply`
    STATS_REQUEST = 20  #: :class:`StatsRequest`
    STANDARDIZE = 22  #: :class:`StandardizeBroadcast`
    MOMENT_REQUEST = 23  #: :class:`MomentRequest`
    SHARE_REPLY = 25  #: :class:`ShareReply`
    CENTRE = 26  #: :class:`CentreBroadcast`
    #: fed-suffstats' basis broadcast (:class:`BasisBroadcast`),
    #: answered with a share of the whitened moments, ``(d + 1)(d + 2)/2`` values
    SUFFSTATS_BASIS = 40
    #: fed-suffstats' first request (:class:`FirstRequest`),
    #: answered with a share of as many values as its count field says
    SUFFSTATS_FIRST = 41
    #: fed-suffstats' centre request (:class:`CentreRequest`), private runs only, once between the
    #: first request and the first basis broadcast; answered with a share of its count's values
    SUFFSTATS_CENTRE = 42
    # 21 and 24 (the per-participant statistics and moments before the sum-shaped encoding) are
    # retired: no build sends or accepts them, and the numbers are not reused


class Header(NamedTuple):
    """The fixed header of a message."""

    kind: int
    version: int
    round: int
    sender: int
    d: int
    count: int


def read_header(data: bytes) -> Header:
    """The header of an encoded message (``ValueError`` when ``data`` is shorter than a header)."""
    if data is None or len(data) < HEADER.size:
        raise ValueError(f"a message needs at least {HEADER.size} bytes, got {0 if data is None else len(data)}")
    return Header(*HEADER.unpack_from(data, 0))


#: where the sender field lies in the header
_SENDER_AT = struct.calcsize("<BBI")
_SENDER = struct.Struct("<I")


def with_sender(data: bytes, sender: int) -> bytes:
    """``data`` (a message, or a prefix holding its header) with its header's sender field set to ``sender``."""
    return data[:_SENDER_AT] + _SENDER.pack(sender) + data[_SENDER_AT + _SENDER.size:]


def same_but_sender(a: bytes, b: bytes) -> bool:
    """Whether two messages are equal except for the sender field of their headers."""
    end = _SENDER_AT + _SENDER.size
    return len(a) == len(b) and a[:_SENDER_AT] == b[:_SENDER_AT] and a[end:] == b[end:]


#: the flags that follow the header of a consensus broadcast: format, stop, ρ₂
_BROADCAST_FLAGS = struct.Struct("<BBd")


def is_stop(data: Optional[bytes]) -> bool:
    """Whether ``data`` is the consensus broadcast that ends the rounds (its stop flag set)."""
    return (
        data is not None and len(data) > HEADER.size + 1 and data[0] == MessageKind.BROADCAST
        and data[HEADER.size + 1] == 1
    )


#: Kinds whose values the coordinator only ever sums over the participants: fed-bnsl's dense update
#: ``B_p`` (with its objective when present), the polish's second moments, the shares of the column
#: statistics and of fed-moments' pooled moments. A secure sum may hide their terms.
SUMMABLE_KINDS = frozenset({MessageKind.DENSE_UPDATE, MessageKind.GRAM_REPLY, MessageKind.SHARE_REPLY})


def summable_span(reply: Optional[bytes]) -> Optional[tuple[int, int]]:
    """``(start, count)``: the float64 values of a summable message (``reply[start:]``, ``count`` of
    them; the bytes before ``start`` travel in the clear and are equal across the participants up to
    the sender field), or ``None`` when the message is not summable."""
    if reply is None or len(reply) < HEADER.size or reply[0] not in SUMMABLE_KINDS:
        return None
    # the dense update's objective flag stays clear
    start = HEADER.size + (1 if reply[0] == MessageKind.DENSE_UPDATE else 0)
    if len(reply) < start or (len(reply) - start) % 8:
        return None
    return start, (len(reply) - start) // 8


_KIND_BROADCAST = MessageKind.BROADCAST
_KIND_SPARSE_UPDATE = MessageKind.SPARSE_UPDATE
_KIND_DENSE_UPDATE = MessageKind.DENSE_UPDATE
_KIND_GRAM_REQUEST = MessageKind.GRAM_REQUEST
_KIND_GRAM_REPLY = MessageKind.GRAM_REPLY
_F64 = struct.Struct("<d")
_PAIR = np.dtype([("k", "<i4"), ("v", "<f8")])


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


def message_kind(data: bytes) -> int:
    """The kind byte of an encoded message (compare with :class:`MessageKind`); ``ValueError`` when
    ``data`` is shorter than a header."""
    if data is None or len(data) < HEADER.size:
        raise ValueError(f"a message needs at least {HEADER.size} bytes, got {0 if data is None else len(data)}")
    return data[0]


def _header(data: bytes, kind: int, what: str) -> tuple[int, int, int, int]:
    """``(round, sender, d, count)`` of a message that must be of ``kind`` (``what`` names it) and
    of this encoding version."""
    if len(data) < HEADER.size:
        raise ValueError(f"a {what} message needs at least {HEADER.size} bytes, got {len(data)}")
    got, version, rnd, sender, d, count = HEADER.unpack_from(data, 0)
    if got != kind:
        raise ValueError(f"not a {what} message")
    if version != _VERSION:
        raise ValueError(f"{what} message of encoding version {version}; this build reads version {_VERSION}")
    return rnd, sender, d, count


def _pairs_bytes(e: SparseEntries, d: int) -> bytes:
    arr = np.empty(len(e), dtype=_PAIR)
    arr["k"] = e.rows.astype(np.int64) * d + e.cols
    arr["v"] = e.values
    return arr.tobytes()


def _pairs_from(buf: memoryview, count: int, d: int) -> SparseEntries:
    arr = np.frombuffer(buf[: count * _PAIR.itemsize], dtype=_PAIR)
    k = arr["k"].astype(np.int64)
    return SparseEntries((k // d).astype(np.int32), (k % d).astype(np.int32), arr["v"].astype(np.float64))


class SupportState:
    """The support (sorted flat indices) of the last broadcast, kept identically by both ends.

    The sender advances its state explicitly after encoding (:meth:`advance`): encoding never
    changes it, so one broadcast can be encoded again (or for another receiver) with the same
    bytes. The receiver's decoder advances the receiver's own state."""

    def __init__(self, support: Optional[np.ndarray] = None) -> None:
        self.support = np.zeros(0, dtype=np.int64) if support is None else np.asarray(support, dtype=np.int64)

    def advance(self, A: np.ndarray) -> None:
        """The support after a broadcast of ``A`` (both ends hold the same afterwards)."""
        self.support = np.flatnonzero(np.asarray(A).ravel())


def encode_matrix(
    A: np.ndarray, allow_sparse: bool = True, state: Optional[SupportState] = None
) -> tuple[int, int, bytes]:
    """``(format, count, payload)`` in the smallest allowed format (see the module docstring).

    With ``state`` (the support both ends hold now), the support-delta format is considered;
    ``state`` is not changed (the sender calls ``state.advance(A)`` once the message is sent)."""
    d = A.shape[0]
    flat = A.ravel()
    support = np.flatnonzero(flat)
    options = []
    if allow_sparse:
        options.append((support.size * _PAIR.itemsize, 0))
        if state is not None:  # sorted flat indices entering / leaving the support (masks: no sorting)
            before = np.zeros(flat.size, dtype=bool)
            before[state.support] = True
            now = flat != 0
            added = np.flatnonzero(now & ~before)
            removed = np.flatnonzero(before & ~now)
            options.append((8 + 4 * (added.size + removed.size) + 8 * support.size, 2))
    options.append((8 * d * d, 1))
    _, fmt = min(options)
    if fmt == 0:
        return 0, int(support.size), _pairs_bytes(SparseEntries.from_dense(A), d)
    if fmt == 2:
        payload = (
            struct.pack("<II", added.size, removed.size)
            + added.astype("<i4").tobytes()
            + removed.astype("<i4").tobytes()
            + flat[support].astype("<f8").tobytes()
        )
        return 2, int(support.size), payload
    return 1, d * d, np.ascontiguousarray(A, dtype="<f8").tobytes()


def _in_matrix(k: np.ndarray, d: int) -> None:
    if k.size and (k.min() < 0 or k.max() >= d * d):
        raise ValueError("a matrix message names an entry outside the d × d matrix")


def decode_matrix(
    fmt: int, count: int, d: int, buf: memoryview, state: Optional[SupportState] = None
) -> np.ndarray:
    """The matrix of a message body (format, count and ``d`` from its header). A body whose length
    does not match its counts, an unknown format or an entry outside the ``d × d`` matrix is a
    ``ValueError`` (checked before anything else is done with it)."""
    if fmt not in (0, 1, 2):
        raise ValueError(f"a matrix message of unknown format {fmt}")
    if fmt == 0:
        if len(buf) != count * _PAIR.itemsize:
            raise ValueError(f"a sparse matrix message of {len(buf)} bytes for {count} entries")
        e = _pairs_from(buf, count, d)
        _in_matrix(np.frombuffer(buf, dtype=_PAIR)["k"].astype(np.int64), d)
        A = e.to_dense(d)
    elif fmt == 1:
        if count != d * d or len(buf) != 8 * d * d:
            raise ValueError(f"a dense matrix message of {len(buf)} bytes for d = {d}")
        A = np.frombuffer(buf[: d * d * 8], dtype="<f8").reshape(d, d).copy()
    else:
        if state is None:
            raise ValueError("a support-delta message needs the receiver's support state")
        if len(buf) < 8:
            raise ValueError("a support-delta message shorter than its counts")
        n_add, n_rem = struct.unpack_from("<II", buf, 0)
        if len(buf) != 8 + 4 * (n_add + n_rem) + 8 * count:
            raise ValueError(f"a support-delta message of {len(buf)} bytes for its counts")
        off = 8
        added = np.frombuffer(buf[off : off + 4 * n_add], dtype="<i4").astype(np.int64)
        off += 4 * n_add
        removed = np.frombuffer(buf[off : off + 4 * n_rem], dtype="<i4").astype(np.int64)
        off += 4 * n_rem
        _in_matrix(added, d)
        _in_matrix(removed, d)
        mask = np.zeros(d * d, dtype=bool)  # (old support − removed) ∪ added, sorted, without sorting
        mask[state.support] = True
        mask[removed] = False
        mask[added] = True
        support = np.flatnonzero(mask)
        if support.size != count:
            raise ValueError("support-delta message does not match the receiver's support")
        A = np.zeros(d * d)
        A[support] = np.frombuffer(buf[off : off + 8 * count], dtype="<f8")
        A = A.reshape(d, d)
    if state is not None:
        state.support = np.flatnonzero(A.ravel())
    return A


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

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_GRAM_REPLY, _VERSION, self.round, self.sender, self.d, int(self.values.size))
        return head + np.asarray(self.values, dtype="<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "GramReply":
        rnd, sender, d, count = _header(data, _KIND_GRAM_REPLY, "second-moment reply")
        values = np.frombuffer(data, dtype="<f8", count=count, offset=HEADER.size).copy()
        return cls(rnd, sender, d, values)


# -- the pre-round column statistics (--standardize, the scale check) and fed-moments ------------
# (kinds 20–24; appended so the numbers of the other kinds never change)

_KIND_STATS_REQUEST = MessageKind.STATS_REQUEST
_KIND_STANDARDIZE = MessageKind.STANDARDIZE
_KIND_MOMENT_REQUEST = MessageKind.MOMENT_REQUEST


def _vectors(data: bytes, off: int, sizes) -> list:
    out = []
    for k in sizes:
        out.append(np.frombuffer(data, dtype="<f8", count=k, offset=off).copy())
        off += 8 * k
    return out


@dataclass(frozen=True)
class StatsRequest:
    """Server → participant (once, before the rounds): send your column statistics. Header only."""

    round: int
    d: int

    kind = _KIND_STATS_REQUEST

    def encode(self) -> bytes:
        return HEADER.pack(_KIND_STATS_REQUEST, _VERSION, self.round, 0, self.d, 0)

    @classmethod
    def decode(cls, data: bytes) -> "StatsRequest":
        rnd, _, d, _ = _header(data, _KIND_STATS_REQUEST, "column-statistics request")
        return cls(rnd, d)


@dataclass(frozen=True)
class StandardizeBroadcast:
    """Server → participant: the pooled column means and standard deviations; every participant
    then works on ``(x − mean) / sd``. ``count`` = 1 when standardising, 0 for "keep the raw
    columns" (the payload is then empty)."""

    round: int
    d: int
    mean: Optional[np.ndarray]
    sd: Optional[np.ndarray]

    kind = _KIND_STANDARDIZE

    def encode(self) -> bytes:
        on = self.mean is not None
        head = HEADER.pack(_KIND_STANDARDIZE, _VERSION, self.round, 0, self.d, int(on))
        if not on:
            return head
        return head + np.asarray(self.mean, "<f8").tobytes() + np.asarray(self.sd, "<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "StandardizeBroadcast":
        rnd, _, d, on = _header(data, _KIND_STANDARDIZE, "standardisation broadcast")
        if not on:
            return cls(rnd, d, None, None)
        mean, sd = _vectors(data, HEADER.size, (d, d))
        return cls(rnd, d, mean, sd)


@dataclass(frozen=True)
class MomentRequest:
    """Server → participant (fed-moments, once): send your moments. Header only."""

    round: int
    d: int

    kind = _KIND_MOMENT_REQUEST

    def encode(self) -> bytes:
        return HEADER.pack(_KIND_MOMENT_REQUEST, _VERSION, self.round, 0, self.d, 0)

    @classmethod
    def decode(cls, data: bytes) -> "MomentRequest":
        rnd, _, d, _ = _header(data, _KIND_MOMENT_REQUEST, "moment request")
        return cls(rnd, d)


# -- sum-shaped replies (kinds 25, 26): everything the coordinator pools is a plain sum over the
# participants, so a secure sum can hide the terms (``bnsl serve --secure-sum``)

_KIND_SHARE_REPLY = MessageKind.SHARE_REPLY
_KIND_CENTRE = MessageKind.CENTRE


@dataclass(frozen=True)
class ShareReply:
    """Participant → server: ``count`` float64 values that the coordinator only ever sums over the
    participants (each participant's share of a pooled statistic, already divided by the public
    total n): its share of the column means ``Σ x / n``, or of the pooled centred second moments
    about a broadcast centre (:class:`CentreBroadcast`). The header is the same for every
    participant up to ``sender``."""

    round: int
    sender: int
    d: int
    values: np.ndarray

    kind = _KIND_SHARE_REPLY

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_SHARE_REPLY, _VERSION, self.round, self.sender, self.d, int(self.values.size))
        return head + np.asarray(self.values, dtype="<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "ShareReply":
        rnd, sender, d, count = _header(data, _KIND_SHARE_REPLY, "share")
        if len(data) != HEADER.size + 8 * count:
            raise ValueError(f"a share message of {count} values has {len(data)} bytes")
        return cls(rnd, sender, d, np.frombuffer(data, dtype="<f8", count=count, offset=HEADER.size).copy())


@dataclass(frozen=True)
class CentreBroadcast:
    """Server → participant: the pooled column means ``mean`` (d float64); answer with your share
    (:class:`ShareReply`) of the pooled centred second moments about them, ``Σ (x − mean)² / n`` per
    column (``full`` false: d values) or the upper triangle, row-major with the diagonal, of
    ``Σ (x − mean)(x − mean)ᵀ / n`` (``full``: d(d+1)/2 values). Header ``count`` = 1 + ``full``."""

    round: int
    d: int
    mean: np.ndarray
    full: bool = False

    kind = _KIND_CENTRE

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_CENTRE, _VERSION, self.round, 0, self.d, 1 + int(self.full))
        return head + np.asarray(self.mean, dtype="<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "CentreBroadcast":
        rnd, _, d, count = _header(data, _KIND_CENTRE, "centre broadcast")
        if count not in (1, 2) or len(data) != HEADER.size + 8 * d:
            raise ValueError("a malformed centre broadcast")
        return cls(rnd, d, np.frombuffer(data, dtype="<f8", count=d, offset=HEADER.size).copy(), count == 2)


# -- reply validation: what the coordinator checks before it uses a participant's reply ----------

#: The kinds of reply that answer each request kind (a request kind not listed needs no reply).
_ANSWERS = {
    MessageKind.BROADCAST: (MessageKind.SPARSE_UPDATE, MessageKind.DENSE_UPDATE),
    MessageKind.GRAM_REQUEST: (MessageKind.GRAM_REPLY,),
    MessageKind.STATS_REQUEST: (MessageKind.SHARE_REPLY,),
    MessageKind.MOMENT_REQUEST: (MessageKind.SHARE_REPLY,),
    MessageKind.CENTRE: (MessageKind.SHARE_REPLY,),
    MessageKind.SUFFSTATS_BASIS: (MessageKind.SHARE_REPLY,),
    MessageKind.SUFFSTATS_FIRST: (MessageKind.SHARE_REPLY,),
    MessageKind.SUFFSTATS_CENTRE: (MessageKind.SHARE_REPLY,),
}

#: The largest magnitude a value in a reply may have, whatever the request. Every value a participant
#: sends is a weight, a share of a mean or of a second moment of finite data: anything this large
#: cannot come from data in any sensible units, and its sum over the participants or its square in the
#: coordinator's solvers would overflow to ``inf`` (``1e100² = 1e200`` is still finite). The limits a
#: run derives from its plan (:mod:`bnsl_cli.federated.reply_limits`) are tighter.
REPLY_VALUE_LIMIT = 1e100

_WHAT_REPLY = {
    MessageKind.SPARSE_UPDATE: "sparse update",
    MessageKind.DENSE_UPDATE: "dense update",
    MessageKind.GRAM_REPLY: "second-moment reply",
    MessageKind.SHARE_REPLY: "share",
}


def _bad_values(values: np.ndarray, what: str) -> Optional[str]:
    if values.size == 0:
        return None
    finite = np.isfinite(values)
    if not finite.all():
        bad = float(values[~finite][0])
        return f"sent a non-finite value ({bad!r}) in its {what}"
    big = float(np.max(np.abs(values)))
    if big >= REPLY_VALUE_LIMIT:
        return f"sent a value of magnitude {big:.3g} in its {what} (at most {REPLY_VALUE_LIMIT:.0e} is accepted)"
    return None


def validate_reply(request: bytes, reply: Optional[bytes], index: int, values: bool = True,
                   limits=None) -> Optional[str]:
    """Why ``reply`` (from the participant at ``index``, 0-based) cannot be the answer to
    ``request``; ``None`` if it can.

    Checked: a reply is there exactly when the request needs one; its kind answers the request's;
    its header carries the request's round and ``d`` and the participant's own index; its length
    matches its declared count (a share or second-moment reply: the count the request implies; a
    dense update: ``d²`` values); a sparse update names distinct entries inside the ``d × d``
    matrix. With ``values`` (every reply not masked by a secure sum): every value and the objective
    are finite and below :data:`REPLY_VALUE_LIMIT` in magnitude, and a share of the pooled variances
    (the answer to a centre broadcast of count 1) is not negative. fed-suffstats: a basis broadcast
    (kind 40) is answered with a share of ``(d + 1)(d + 2)/2`` values, its first request (kind 41)
    and its centre request (kind 42) with a share of the request's count.

    ``limits`` (a :class:`~bnsl_cli.federated.reply_limits.ReplyLimits`, with ``values``): the values
    must also lie within what the participant's rows can give by the run plan's public facts
    (``limits.check(request, values, index)``: clipped releases and their noise tails, declared row
    counts, the site's earlier shares); checked after everything above."""
    if request is None or len(request) < HEADER.size:
        return None
    r_kind, _, r_round, _, r_d, r_count = HEADER.unpack_from(request, 0)
    no_reply = is_stop(request) or r_kind == MessageKind.STANDARDIZE
    if reply is None:
        return None if no_reply else "sent no reply to a request that needs one"
    if no_reply:
        return "replied to the stop broadcast" if r_kind == MessageKind.BROADCAST else "replied to a broadcast that needs no reply"
    if len(reply) < HEADER.size + 1:
        return f"sent a {len(reply)}-byte message, shorter than the message header"
    kind, _, rnd, sender, d, count = HEADER.unpack_from(reply, 0)
    allowed = _ANSWERS.get(r_kind)
    if allowed is not None and kind not in allowed:
        return f"answered a kind-{r_kind} message with a kind-{kind} message"
    if rnd != r_round:
        return f"sent a message for round {rnd} during round {r_round} (out of order)"
    if sender != index:
        return f"sent a message signed as participant {sender + 1}, not {index + 1}"
    if d != r_d:
        return f"sent a message for d = {d}, not {r_d}"
    body = len(reply) - HEADER.size
    objective = None
    if kind in (MessageKind.SPARSE_UPDATE, MessageKind.DENSE_UPDATE):
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
            vals = arr["v"]
        else:
            if count != d * d or body != 8 * d * d:
                return f"sent a dense update of {body} payload bytes for d = {d} (malformed)"
            vals = np.frombuffer(reply, dtype="<f8", offset=len(reply) - body)
    elif kind == MessageKind.SHARE_REPLY:
        if r_kind == MessageKind.SUFFSTATS_BASIS:
            want = (d + 1) * (d + 2) // 2
        elif r_kind in (MessageKind.SUFFSTATS_FIRST, MessageKind.SUFFSTATS_CENTRE):
            want = r_count
        else:
            want = d * (d + 1) // 2 if (r_kind == MessageKind.CENTRE and r_count == 2) else d
        if count != want or body != 8 * count:
            return f"sent a share of {count} values ({body} bytes) where {want} were due (malformed)"
        vals = np.frombuffer(reply, dtype="<f8", offset=HEADER.size)
    elif kind == MessageKind.GRAM_REPLY:
        if count != r_count or body != 8 * count:
            return f"sent {count} second moments ({body} bytes) for {r_count} requested (malformed)"
        vals = np.frombuffer(reply, dtype="<f8", offset=HEADER.size)
    else:
        return None
    if not values:
        return None
    if objective is not None:
        why = _bad_values(objective, "objective")
        if why is not None:
            return why
    why = _bad_values(vals, _WHAT_REPLY[MessageKind(kind)])
    if why is None and r_kind == MessageKind.CENTRE and r_count == 1 and vals.size and float(vals.min()) < 0:
        # a share of the pooled variances is a sum of squares (or, under DP, of a released v̂ > 0
        # and a square) divided by n: never negative
        return f"sent a negative variance share ({float(vals.min()):.3g})"
    if why is None and limits is not None:
        why = limits.check(request, np.asarray(vals, dtype=float), index)
    return why


# fed-suffstats (federated/methods/suffstats.py)


@dataclass(frozen=True)
class FirstRequest:
    """Server → participant, once: send your first share (private: the scale histograms; not
    private: the column-mean shares). ``count`` is the number of values due (the networked fleet
    checks the replies against it). Header only."""

    round: int
    d: int
    count: int

    kind = MessageKind.SUFFSTATS_FIRST

    def encode(self) -> bytes:
        return HEADER.pack(MessageKind.SUFFSTATS_FIRST, _VERSION, self.round, 0, self.d, self.count)

    @classmethod
    def decode(cls, data: bytes) -> "FirstRequest":
        kind, version, rnd, _, d, count = read_header(data)
        if kind != MessageKind.SUFFSTATS_FIRST or version != _VERSION or len(data) != HEADER.size:
            raise ValueError("not a fed-suffstats first request")
        return cls(rnd, d, count)


@dataclass(frozen=True)
class BasisBroadcast:
    """Server → participant: release stage ``round`` in the basis ``m̃``, ``s̃``, ``L`` (lower
    triangular, d × d, row-major)."""

    round: int
    d: int
    centre: np.ndarray
    scale: np.ndarray
    L: np.ndarray

    kind = MessageKind.SUFFSTATS_BASIS

    def encode(self) -> bytes:
        head = HEADER.pack(MessageKind.SUFFSTATS_BASIS, _VERSION, self.round, 0, self.d, 1)
        return head + b"".join(np.asarray(v, "<f8").tobytes() for v in (self.centre, self.scale, self.L))

    @classmethod
    def decode(cls, data: bytes) -> "BasisBroadcast":
        kind, version, rnd, _, d, _ = read_header(data)
        if kind != MessageKind.SUFFSTATS_BASIS or version != _VERSION:
            raise ValueError("not a basis broadcast")
        if len(data) != HEADER.size + 8 * (2 * d + d * d):
            raise ValueError(f"a basis broadcast for d = {d} has {len(data)} bytes")
        v = np.frombuffer(data, "<f8", offset=HEADER.size).copy()
        return cls(rnd, d, v[:d], v[d : 2 * d], v[2 * d :].reshape(d, d))


#: The round number of fed-suffstats' centre request (and of its replies): the secure sum tells the
#: masks of the shares apart by kind and round, and the first request is round 0, the stages 1 … K.
CENTRE_ROUND = 0xFFFFFFFF


@dataclass(frozen=True)
class CentreRequest:
    """Server → participant, private fed-suffstats only, once after the first request: send your share
    of the centre histograms, per column ``count / d`` linear bins of width ``width_j`` starting at
    ``lo_j`` (the end bins take everything beyond). ``lo`` and ``width`` are post-processing of the
    scale histograms. ``round`` is :data:`CENTRE_ROUND`."""

    round: int
    d: int
    count: int
    lo: np.ndarray
    width: np.ndarray

    kind = MessageKind.SUFFSTATS_CENTRE

    def encode(self) -> bytes:
        head = HEADER.pack(MessageKind.SUFFSTATS_CENTRE, _VERSION, self.round, 0, self.d, self.count)
        return head + b"".join(np.asarray(v, "<f8").tobytes() for v in (self.lo, self.width))

    @classmethod
    def decode(cls, data: bytes) -> "CentreRequest":
        kind, version, rnd, _, d, count = read_header(data)
        if kind != MessageKind.SUFFSTATS_CENTRE or version != _VERSION:
            raise ValueError("not a fed-suffstats centre request")
        if len(data) != HEADER.size + 16 * d:
            raise ValueError(f"a centre request for d = {d} has {len(data)} bytes")
        v = np.frombuffer(data, "<f8", offset=HEADER.size).copy()
        return cls(rnd, d, count, v[:d], v[d:])
