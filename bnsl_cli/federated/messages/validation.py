"""What the coordinator checks of a participant's reply before it uses it (its kind, round, sender,
shape and values)."""

from __future__ import annotations

from typing import Optional

import numpy as np

# the core message modules declare their classes when imported (a method's own: its package's)
from bnsl_cli.federated.messages import admm as _admm, shares as _shares  # noqa: F401
from bnsl_cli.federated.messages.wire import HEADER, reply_reader, reply_shape

# -- reply validation: what the coordinator checks before it uses a participant's reply ----------

#: The largest magnitude a value in a reply may have, whatever the request. Every value a participant
#: sends is a weight, a share of a mean or of a second moment of finite data: anything this large
#: cannot come from data in any sensible units, and its sum over the participants or its square in the
#: coordinator's solvers would overflow to ``inf`` (``1e100² = 1e200`` is still finite). The limits a
#: run derives from its plan (:mod:`bnsl_cli.federated.reply_limits`) are tighter.
REPLY_VALUE_LIMIT = 1e100



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

    Checked: a reply is there exactly when the request needs one; its kind answers the request's:
    it is one of the kinds the request's class declares (``ReplyShape.answered_by``; a request of a
    kind no class declares accepts no reply, one whose shape lists no kind accepts none) and a class
    declares its payload reader (a kind nobody declares is refused, never passed with its values
    unread); its header carries the request's round and ``d`` and the participant's own index; its
    length matches its declared count (a share or second-moment reply: the count the request implies; a
    dense update: ``d²`` values); a sparse update names distinct entries inside the ``d × d``
    matrix. With ``values`` (every reply not masked by a secure sum): every value and the objective
    are finite and below :data:`REPLY_VALUE_LIMIT` in magnitude, and a share of the pooled variances
    (the answer to a centre broadcast of count 1) is not negative. Every shape is the one the request's
    class declares (:func:`~bnsl_cli.federated.messages.wire.declare`), a method's own requests too.

    ``limits`` (a :class:`~bnsl_cli.federated.reply_limits.ReplyLimits`, with ``values``): the values
    must also lie within what the participant's rows can give by the run plan's public facts
    (``limits.check(request, values, index)``: clipped releases and their noise tails, declared row
    counts, the site's earlier shares); checked after everything above."""
    if request is None or len(request) < HEADER.size:
        return None
    r_kind, _, r_round, _, r_d, r_count = HEADER.unpack_from(request, 0)
    shape = reply_shape(r_kind)
    no_reply = shape is not None and not shape.needs_reply(request)
    if reply is None:
        return None if no_reply else "sent no reply to a request that needs one"
    if shape is None:  # nothing declares what answers this request, so no reply can be checked
        return f"answered a kind-{r_kind} message, whose replies no message class declares"
    if no_reply:
        return shape.unneeded
    if len(reply) < HEADER.size + 1:
        return f"sent a {len(reply)}-byte message, shorter than the message header"
    kind, _, rnd, sender, d, count = HEADER.unpack_from(reply, 0)
    if kind not in shape.answered_by:
        return f"answered a kind-{r_kind} message with a kind-{kind} message"
    if rnd != r_round:
        return f"sent a message for round {rnd} during round {r_round} (out of order)"
    if sender != index:
        return f"sent a message signed as participant {sender + 1}, not {index + 1}"
    if d != r_d:
        return f"sent a message for d = {d}, not {r_d}"
    reader = reply_reader(kind)
    if reader is None:  # declared to answer, but no class reads its values: refused, not passed unread
        return f"sent a kind-{kind} message, whose values no message class declares how to read"
    due = None if shape.due is None else shape.due(d, r_count)
    read = reader.payload(reply, d, count, due)
    if isinstance(read, str):
        return read
    vals, objective = read
    if not values:
        return None
    if objective is not None:
        why = _bad_values(objective, "objective")
        if why is not None:
            return why
    why = _bad_values(vals, reader.what)
    if why is None and shape.non_negative(r_count) and vals.size and float(vals.min()) < 0:
        # a share of the pooled variances is a sum of squares (or, under DP, of a released v̂ > 0
        # and a square) divided by n: never negative
        return f"sent a negative variance share ({float(vals.min()):.3g})"
    if why is None and limits is not None:
        why = limits.check(request, np.asarray(vals, dtype=float), index)
    return why
