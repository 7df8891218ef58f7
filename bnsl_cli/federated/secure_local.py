"""An in-process fleet whose summable replies reach the coordinator only as their secure sum.

Distributed noise (``--noise distributed``, :func:`bnsl_cli.privacy.split_noise.distribute_noise`) is private
only when nobody sees one site's share: ``bnsl serve --secure-sum`` over the network, and in process
this wrapper, which masks every site's share with the masks of :mod:`bnsl_cli.federated.secure_sum`
(keys made here for the run) and hands the coordinator code their sum alone.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from bnsl_cli.federated.fleet import checked_replies, checked_sum
from bnsl_cli.federated.messages import with_sender
from bnsl_cli.federated.secure_sum import ALL_SITES, SCALE_BITS, SecureSum, generate_keypair, summable_span, unmask_sum
from bnsl_cli.federated.traffic import Traffic

__all__ = ["SecureLocalFleet"]


class SecureLocalFleet:
    """An in-process fleet whose summable replies are masked by every site (the secure sum of
    :mod:`bnsl_cli.federated.secure_sum`, with keys made here for this run) and unmasked only as
    their sum: the coordinator code gets the sum in the first reply and zeros in the others, as
    from ``bnsl serve --secure-sum``. Sites holding split noise need this (or the networked one).

    As over the network, the inner fleet checks every reply's shape and that its values are finite
    and in the blanket range; the run's ``limits`` (set by ``run``) apply to the replies in the clear
    one by one and to the summable ones only as their sum (one site's values are never seen)."""

    secure_sum = True

    def __init__(self, inner, n_sites: int, scale_bits: Optional[int] = None):
        self.inner = inner
        self.workers = inner.workers
        # this fleet's own meter: the message to every site and each site's reply as it crosses,
        # masked when summable (the inner fleet's meter is not read)
        self.traffic = Traffic(len(inner))
        self.scale_bits = SCALE_BITS if scale_bits is None else int(scale_bits)
        keys = [generate_keypair() for _ in range(n_sites)]
        run_id = os.urandom(16)
        self._sites = [SecureSum(i, keys[i][0], [k[1] for k in keys], run_id, self.scale_bits) for i in range(n_sites)]
        self._count = 0
        self.limits = None  # the run's reply limits (run() sets them; the inner fleet keeps the blanket checks)

    def __len__(self) -> int:
        return len(self.inner)

    def exchange(self, msg: bytes):
        out = self.inner.exchange(msg)
        spans = [summable_span(r) for r in out]
        if not out or any(s is None for s in spans):
            if any(s is not None for s in spans):
                raise ValueError("secure sum: some replies are summable and some are not")
            self.traffic.count(msg, out)
            return checked_replies(msg, out, self.limits)
        self._count += 1
        tag = b"exchange|%d" % self._count
        start = spans[0][0]
        masked = [self._sites[k].mask(np.frombuffer(r, "<f8", offset=start), tag) for k, r in enumerate(out)]
        # what each site sends: its clear prefix and its masked values
        self.traffic.count(msg, [r[:start] + np.asarray(m).astype("<u8").tobytes() for r, m in zip(out, masked)])
        total = unmask_sum(masked, self.scale_bits)
        first = out[0]
        prefix = with_sender(first[:start], ALL_SITES)
        zeros = np.zeros_like(total).astype("<f8").tobytes()
        summed = [prefix + (total.astype("<f8").tobytes() if k == 0 else zeros) for k in range(len(out))]
        return checked_sum(msg, summed, self.limits)

    def finish(self):
        return self.inner.finish()

    def close(self) -> None:
        self.inner.close()

