"""fed-suffstats' requests: the first request, the basis broadcast and the centre request (their kind
numbers in :class:`~bnsl_cli.federated.messages.wire.MessageKind`, their bytes here)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bnsl_cli.federated.messages.wire import (
    declare,
    _VERSION,
    HEADER,
    MessageKind,
    ReplyShape,
    read_header,
)

@dataclass(frozen=True)
class FirstRequest:
    """Server → participant, once: send your first share (private: the scale histograms; not
    private: the column-mean shares). ``count`` is the number of values due (the networked fleet
    checks the replies against it). Header only."""

    round: int
    d: int
    count: int

    kind = MessageKind.FIRST_REQUEST
    #: answered by a share of as many values as its count says
    reply = ReplyShape((MessageKind.SHARE_REPLY,), due=lambda d, count: count)

    def encode(self) -> bytes:
        return HEADER.pack(MessageKind.FIRST_REQUEST, _VERSION, self.round, 0, self.d, self.count)

    @classmethod
    def decode(cls, data: bytes) -> "FirstRequest":
        kind, version, rnd, _, d, count = read_header(data)
        if kind != MessageKind.FIRST_REQUEST or version != _VERSION or len(data) != HEADER.size:
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

    kind = MessageKind.BASIS_BROADCAST
    #: answered by a share of the whitened moments' upper triangle, (d + 1)(d + 2)/2 values
    reply = ReplyShape((MessageKind.SHARE_REPLY,), due=lambda d, count: (d + 1) * (d + 2) // 2)

    def encode(self) -> bytes:
        head = HEADER.pack(MessageKind.BASIS_BROADCAST, _VERSION, self.round, 0, self.d, 1)
        return head + b"".join(np.asarray(v, "<f8").tobytes() for v in (self.centre, self.scale, self.L))

    @classmethod
    def decode(cls, data: bytes) -> "BasisBroadcast":
        kind, version, rnd, _, d, _ = read_header(data)
        if kind != MessageKind.BASIS_BROADCAST or version != _VERSION:
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

    kind = MessageKind.CENTRE_REQUEST
    #: answered by a share of as many values as its count says
    reply = ReplyShape((MessageKind.SHARE_REPLY,), due=lambda d, count: count)

    def encode(self) -> bytes:
        head = HEADER.pack(MessageKind.CENTRE_REQUEST, _VERSION, self.round, 0, self.d, self.count)
        return head + b"".join(np.asarray(v, "<f8").tobytes() for v in (self.lo, self.width))

    @classmethod
    def decode(cls, data: bytes) -> "CentreRequest":
        kind, version, rnd, _, d, count = read_header(data)
        if kind != MessageKind.CENTRE_REQUEST or version != _VERSION:
            raise ValueError("not a fed-suffstats centre request")
        if len(data) != HEADER.size + 16 * d:
            raise ValueError(f"a centre request for d = {d} has {len(data)} bytes")
        v = np.frombuffer(data, "<f8", offset=HEADER.size).copy()
        return cls(rnd, d, count, v[:d], v[d:])


#: The round number of fed-suffstats' table request (and of its replies), apart from the stages' and the
#: centre request's for the secure sum's masks.
TABLE_ROUND = 0xFFFFFFFE


@dataclass(frozen=True)
class TableRequest:
    """Server → participant, a non-private run with categorical columns only, once after the stages:
    send your share of the contingency tables of ``groups`` (each a tuple of variable indices into the
    plan's ``columns.names``, all categorical), each table's cells in C order over the variables' levels
    (the first variable varying slowest), the tables one after another; ``count`` is every cell.
    ``round`` is :data:`TABLE_ROUND`."""

    round: int
    d: int
    count: int
    groups: tuple

    kind = MessageKind.TABLE_REQUEST
    #: answered by a share of as many values as its count says
    reply = ReplyShape((MessageKind.SHARE_REPLY,), due=lambda d, count: count)

    def encode(self) -> bytes:
        head = HEADER.pack(MessageKind.TABLE_REQUEST, _VERSION, self.round, 0, self.d, self.count)
        flat = [len(self.groups)] + [x for g in self.groups for x in (len(g), *g)]
        return head + np.asarray(flat, "<u4").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "TableRequest":
        kind, version, rnd, _, d, count = read_header(data)
        if kind != MessageKind.TABLE_REQUEST or version != _VERSION:
            raise ValueError("not a fed-suffstats table request")
        body = data[HEADER.size:]
        if len(body) % 4 or not body:
            raise ValueError(f"a table request of {len(data)} bytes")
        v = np.frombuffer(body, "<u4").astype(int).tolist()
        groups, k = [], 1
        for _ in range(v[0]):
            if k >= len(v) or k + 1 + v[k] > len(v):
                raise ValueError("a table request whose groups overrun it")
            groups.append(tuple(v[k + 1 : k + 1 + v[k]]))
            k += 1 + v[k]
        if k != len(v):
            raise ValueError("a table request with bytes after its groups")
        return cls(rnd, d, count, tuple(groups))


declare(FirstRequest, BasisBroadcast, CentreRequest, TableRequest)
