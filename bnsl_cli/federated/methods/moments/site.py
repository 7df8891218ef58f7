"""The fed-moments site: its share of the column means, then of the pooled centred moments (private:
post-processing of its one-off releases and its moment-matrix release), each once."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.messages import (
    CentreBroadcast,
    MomentRequest,
    ShareReply,
    StandardizeBroadcast,
    message_kind,
)
from bnsl_cli.federated.methods.moments.releases import private_moment_matrix
from bnsl_cli.federated.share_site import ShareSite
from bnsl_cli.federated.site_sequence import refuse_unsafe, stretch_problem
from bnsl_cli.privacy import one_off
from bnsl_cli.privacy.bounding import clamp_rows
from bnsl_cli.privacy.ledger import PrivacyLedger
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.stats import (
    mean_share,
    scatter_share,
    upper_triangle,
)


class MomentSite(ShareSite):
    """A fed-moments participant: answers one :class:`MomentRequest` with its share of the column
    means and then one :class:`CentreBroadcast` with its share of the centred second moments about
    the broadcast pooled mean (each once). ``n_total`` is the public total row count (defaults to
    its own rows: a single participant).

    With split noise (the plan's moment-matrix release has ``split = P``, ``bnsl serve --split-noise``)
    the release waits for the common public scale: a :class:`CentreBroadcast` without ``full`` asks
    for its share of the pooled variances (post-processing of its released ``ĉ``, ``v̂``), a
    :class:`StandardizeBroadcast` brings the pooled ``σ̄``, and the release is made on ``(x − ĉ)/σ̄``
    with ``1/P`` of the noise variance (:mod:`bnsl_cli.privacy.split_noise`)."""

    def __init__(self, pid: int, X: np.ndarray, *, privacy=None, rng=None, label: Optional[str] = None,
                 n_total: Optional[int] = None):
        t0 = time.perf_counter()
        self.pid = int(pid)
        self.who = f"participant {self.pid + 1}"
        X = np.asarray(X, dtype=float)
        self.n_rows, self.d = int(X.shape[0]), int(X.shape[1])
        self.n_total = int(self.n_rows if n_total is None else n_total)
        self.ledger = PrivacyLedger()
        self.ledger.add_participant(self.pid)
        self.notes: dict = {}
        self.answered: set = set()
        self._split = 1
        self._M = None
        if privacy is None:
            self._X = X
            self._centre = None
        else:
            if rng is None:
                raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
            centre, v_hat, events, notes = one_off.private_preprocessing(
                X, one_off.one_off_multipliers(privacy), privacy.value_bound, rng, label or f"participant {pid + 1}"
            )
            for ev in events:
                self.ledger.record(self.pid, ev)
            self.notes = notes
            mult = privacy.multiplier(ReleaseKind.MOMENT_MATRIX)
            if mult is None:
                raise PrivacyBudgetError(f"participant {pid + 1}: the plan calibrated no moment-matrix release")
            self._X = None  # from here on only the releases are used (and, with split noise, _Xp)
            self._centre = np.asarray(centre, float)
            self._v_hat = np.asarray(v_hat, float)
            X = clamp_rows(X, self._centre, self._v_hat)  # bounded, finite rows whatever arrives (bounding)
            self._split = max([int(r.split) for r in privacy.releases if r.kind == ReleaseKind.MOMENT_MATRIX] or [1])
            self._private = (privacy.clip, mult, rng)
            self._M = None
            if self._split == 1:
                # rows scaled column-wise by the released spreads √v̂ (post-processing of a release), so
                # the clip and the noise do not depend on the columns' units; the matrix is scaled back
                self._release(X, np.sqrt(self._v_hat))
            else:
                # split noise: every site must scale by the same public spreads (the pooled σ the
                # coordinator broadcasts), so that the sites' noise shares add up in common units
                self._Xp = X
        self.compute_s = time.perf_counter() - t0

    def _release(self, X: np.ndarray, s: np.ndarray) -> None:
        """The moment-matrix release on ``(x − ĉ)/s`` (``s`` public or released), scaled back."""
        clip, mult, rng = self._private
        Z = (X - self._centre[None, :]) / s[None, :]
        M, ev = private_moment_matrix(Z, clip, mult, rng, self._split)
        self.ledger.record(self.pid, ev)
        self._M = M * np.outer(s, s)

    def handle(self, data: bytes) -> Optional[bytes]:
        t0 = time.perf_counter()
        kind = message_kind(data)
        if kind == MomentRequest.kind:
            req = MomentRequest.decode(data)
            self._once("mean")
            if self._X is not None:
                values = mean_share(self._X, self.n_total)
            else:  # post-processing of the released means
                values = self.n_rows * self._centre / float(self.n_total)
        elif kind == CentreBroadcast.kind and not CentreBroadcast.decode(data).full:
            # split noise only: the share of the pooled variances about μ, from the released ĉ, v̂
            req = CentreBroadcast.decode(data)
            if self._centre is None or self._split == 1 or "mean" not in self.answered:
                raise ValueError(f"participant {self.pid + 1}: a variance request out of order")
            if req.mean.size != self.d or not np.all(np.isfinite(req.mean)):
                raise ValueError(f"participant {self.pid + 1}: the centre broadcast is not usable")
            self._once("variance")
            off = self._centre - req.mean
            values = (self.n_rows * self._v_hat + self.n_rows * off * off) / float(self.n_total)
        elif kind == StandardizeBroadcast.kind:
            # split noise only: the pooled spreads every site scales its rows by (public)
            msg = StandardizeBroadcast.decode(data)
            if self._split == 1 or "variance" not in self.answered or self._M is not None or msg.sd is None:
                raise ValueError(f"participant {self.pid + 1}: a scale broadcast out of order")
            if msg.sd.size != self.d or not (np.all(np.isfinite(msg.sd)) and np.all(msg.sd > 0)):
                raise ValueError(f"participant {self.pid + 1}: the scale broadcast is not usable")
            # (x − ĉ)/σ̄ of the clamped rows must stay finite, whatever the rows (released ĉ, v̂ and the
            # broadcast alone, before the rows are used)
            refuse_unsafe(self.who, stretch_problem("scale broadcast", self._centre, self._v_hat, self._centre,
                                                    np.asarray(msg.sd, float)))
            self._release(self._Xp, np.asarray(msg.sd, float))
            self._Xp = None
            self.compute_s += time.perf_counter() - t0
            return None
        elif kind == CentreBroadcast.kind:
            req = CentreBroadcast.decode(data)
            if "mean" not in self.answered or (self._X is None and self._M is None):
                raise ValueError(f"participant {self.pid + 1}: a centre broadcast before the moment request"
                                 + ("" if "mean" not in self.answered else " or before the scale broadcast"))
            if req.mean.size != self.d or not np.all(np.isfinite(req.mean)):
                raise ValueError(f"participant {self.pid + 1}: the centre broadcast is not usable")
            self._once("moment")
            if self._X is not None:
                values = scatter_share(self._X, req.mean, self.n_total)
                self._X = None
            else:  # post-processing of the released matrix and means, and the broadcast μ
                off = self._centre - req.mean
                values = upper_triangle(self._M + self.n_rows * np.outer(off, off)) / float(self.n_total)
        else:
            raise ValueError(f"participant {self.pid + 1}: fed-moments answers only a moment request and a centre broadcast")
        self.compute_s += time.perf_counter() - t0
        return ShareReply(req.round, self.pid, self.d, values).encode()


def make_moment_site(plan, pid: int, X: np.ndarray, rng) -> MomentSite:
    """The site side of ``fed-moments`` from the run plan."""
    return MomentSite(pid, X, privacy=plan.privacy, rng=rng, label=plan.participants[pid].label, n_total=plan.n_total)
