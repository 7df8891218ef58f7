"""What the coordinator checks of a participant's reply before it uses it (its kind, round, sender,
shape and values)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from bnsl_cli.federated.messages.wire import _PAIR, HEADER, MessageKind, is_stop

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
