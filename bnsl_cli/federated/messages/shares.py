"""The sum-shaped exchanges: the column-statistics request, the standardisation broadcast,
fed-moments' moment request, the centre broadcast and every share reply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from bnsl_cli.federated.messages.wire import (
    declare,
    _VERSION,
    HEADER,
    MessageKind,
    ReplyShape,
    _header,
)

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
    #: answered by a share of d values (the column sums over n)
    reply = ReplyShape((MessageKind.SHARE_REPLY,), due=lambda d, count: d)

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
    #: needs no reply
    reply = ReplyShape(needs_reply=lambda data: False)

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
    #: answered by a share of the column means, d values
    reply = ReplyShape((MessageKind.SHARE_REPLY,), due=lambda d, count: d)

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
    what = "share"

    @staticmethod
    def payload(reply: bytes, d: int, count: int, due: Optional[int]):
        want = d if due is None else due
        body = len(reply) - HEADER.size
        if count != want or body != 8 * count:
            return f"sent a share of {count} values ({body} bytes) where {want} were due (malformed)"
        return np.frombuffer(reply, dtype="<f8", offset=HEADER.size), None

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
    #: answered by a share of d variances (count 1: sums of squares, never negative) or of the
    #: d(d + 1)/2 upper-triangle moments (count 2)
    reply = ReplyShape((MessageKind.SHARE_REPLY,), due=lambda d, count: d * (d + 1) // 2 if count == 2 else d,
                       non_negative=lambda count: count == 1)

    def encode(self) -> bytes:
        head = HEADER.pack(_KIND_CENTRE, _VERSION, self.round, 0, self.d, 1 + int(self.full))
        return head + np.asarray(self.mean, dtype="<f8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> "CentreBroadcast":
        rnd, _, d, count = _header(data, _KIND_CENTRE, "centre broadcast")
        if count not in (1, 2) or len(data) != HEADER.size + 8 * d:
            raise ValueError("a malformed centre broadcast")
        return cls(rnd, d, np.frombuffer(data, dtype="<f8", count=d, offset=HEADER.size).copy(), count == 2)


declare(StatsRequest, StandardizeBroadcast, MomentRequest, ShareReply, CentreBroadcast)
