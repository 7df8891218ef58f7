"""The wire format's common parts: the header, the message kinds, the sender field, the matrix
encodings (sparse pairs, dense, support delta) and their decoding with its checks."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import numpy as np

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
    #: a basis broadcast (a centre, a scale and a whitening matrix per column),
    #: answered with a share of the whitened moments, ``(d + 1)(d + 2)/2`` values
    BASIS_BROADCAST = 40
    #: a first request of a staged method, answered with a share of as many values as its count
    #: field says
    FIRST_REQUEST = 41
    #: a centre request (bins per column), private runs only, once between the first request and
    #: the first basis broadcast; answered with a share of its count's values
    CENTRE_REQUEST = 42
    #: a contingency-table request (groups of categorical variables), non-private runs with categorical
    #: columns only, once after the stages; answered with a share of its count's values (the cells)
    TABLE_REQUEST = 43
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
class ReplyShape:
    """What a request kind's reply must look like (each request class declares one as ``reply``;
    :func:`~bnsl_cli.federated.messages.validation.validate_reply` reads it): the reply kinds that
    answer it, ``due(d, count)`` the number of values due (from the request's header; ``None``: the
    reply's own count), whether a given message of this kind needs a reply at all (and how a reply
    it did not need is named), and whether its values are sums of squares (never negative)."""

    answered_by: tuple = ()
    due: Optional[Callable[[int, int], int]] = None
    needs_reply: Callable[[bytes], bool] = lambda data: True
    unneeded: str = "replied to a broadcast that needs no reply"
    non_negative: Callable[[int], bool] = lambda count: False


# -- the message classes' declarations ---------------------------------------------------------

#: Every request kind's reply shape (a request class's ``reply``) and every reply kind's class (one
#: with a ``payload`` reader), as the message modules declare them (:func:`declare`): the core ones
#: in this package, each method's own in its package. Reply validation reads nothing else.
_CLASSES: dict = {}
_SHAPES: dict = {}
_READERS: dict = {}


def declare(*classes) -> None:
    """Declare message classes: a class with ``reply`` (a :class:`ReplyShape`) is a request whose
    replies :func:`~bnsl_cli.federated.messages.validation.validate_reply` checks against it, one with
    ``payload`` a reply whose values it reads. A kind number belongs to one class (``ValueError``)."""
    for cls in classes:
        kind = int(cls.kind)
        known = _CLASSES.setdefault(kind, cls)
        if (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"message kind {kind} is declared by {known.__qualname__} and {cls.__qualname__}")
        _CLASSES[kind] = cls
        if hasattr(cls, "reply"):
            _SHAPES[kind] = cls.reply
        if hasattr(cls, "payload"):
            _READERS[kind] = cls


def reply_shape(kind: int) -> Optional[ReplyShape]:
    """The declared reply shape of request ``kind`` (``None``: not a declared request)."""
    return _SHAPES.get(kind)


def reply_reader(kind: int):
    """The declared class of reply ``kind`` (``None``: not a declared reply)."""
    return _READERS.get(kind)
