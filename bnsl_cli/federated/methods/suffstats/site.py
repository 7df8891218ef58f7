"""The fed-suffstats site: answers the first request, the centre request and each basis broadcast
with its share of the summed statistics, each once, after checking the message (the sequence's checks)."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.messages import ShareReply, message_kind
from bnsl_cli.federated.methods.suffstats.messages import BasisBroadcast, CentreRequest, FirstRequest, TableRequest
from bnsl_cli.federated.methods.suffstats.releases import (
    STAGES,
    centre_histogram_release,
    scale_histogram_release,
    stage_releases,
    whitened_moments_release,
    whitened_rows,
)
from bnsl_cli.federated.methods.suffstats.sequence import (
    basis_problem,
    centre_request_problem,
    first_request_problem,
    table_request_problem,
)
from bnsl_cli.federated.share_site import ShareSite
from bnsl_cli.federated.site_sequence import refuse_unsafe
from bnsl_cli.privacy.ledger import PrivacyLedger
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.stats import upper_triangle


class SuffstatsSite(ShareSite):
    """A fed-suffstats participant. Answers a :class:`FirstRequest` (private: its share of the
    scale histograms; non-private: of the column means) and then every :class:`BasisBroadcast` with
    its share of the augmented second moments in that basis, each stage once."""

    def __init__(self, pid: int, X: np.ndarray, *, privacy=None, rng=None, label: Optional[str] = None,
                 n_total: Optional[int] = None, plan=None):
        self.pid = int(pid)
        self._X = np.asarray(X, dtype=float)
        self.n_rows, self.d = self._X.shape
        self.n_total = int(self.n_rows if n_total is None else n_total)
        self.label = self.who = label or f"participant {pid + 1}"
        self.ledger = PrivacyLedger()
        self.ledger.add_participant(self.pid)
        self.privacy = privacy
        self.rng = rng
        self.compute_s = 0.0
        self.notes: dict = {}
        self.answered: set = set()
        self.plan = plan  # (the table request's checks read the plan's columns)
        if privacy is not None:
            if rng is None:
                raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
            if (len(stage_releases(privacy)) != STAGES or privacy.multiplier(ReleaseKind.SCALE_HISTOGRAM) is None
                    or privacy.multiplier(ReleaseKind.CENTRE_HISTOGRAM) is None):
                raise PrivacyBudgetError(f"{self.label}: the plan does not calibrate fed-suffstats' releases")

    def _split(self, rel) -> int:
        return int(rel.split)

    def handle(self, data: bytes) -> Optional[bytes]:
        t0 = time.perf_counter()
        kind = message_kind(data)
        if kind == FirstRequest.kind:
            req = FirstRequest.decode(data)
            refuse_unsafe(self.label, first_request_problem(req, self.d, self.privacy is not None))
            self._once("first")
            if self.privacy is None:
                values = self._X.sum(axis=0) / float(self.n_total)
            else:
                rel = next(r for r in self.privacy.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
                flat, event = scale_histogram_release(self._X, rel.multiplier, self.rng, self._split(rel))
                values = flat / float(self.n_total)
                self.ledger.record(self.pid, event)
        elif kind == CentreRequest.kind:
            req = CentreRequest.decode(data)
            if self.privacy is None:
                raise ValueError(f"{self.label}: a centre request in a non-private run")
            if "first" not in self.answered or any(w.startswith("stage") for w in self.answered):
                raise ValueError(f"{self.label}: a centre request comes after the first request and before the stages")
            refuse_unsafe(self.label, centre_request_problem(req, self.d))
            self._once("centre")
            rel = next(r for r in self.privacy.releases if r.kind == ReleaseKind.CENTRE_HISTOGRAM)
            flat, event = centre_histogram_release(self._X, req.lo, req.width, rel.multiplier, self.rng, self._split(rel))
            values = flat / float(self.n_total)
            self.ledger.record(self.pid, event)
        elif kind == BasisBroadcast.kind:
            msg = BasisBroadcast.decode(data)
            if "first" not in self.answered:
                raise ValueError(f"{self.label}: a basis broadcast before the first request")
            refuse_unsafe(self.label, basis_problem(msg, self.d, self.privacy is not None))
            self._once(f"stage {msg.round}")
            if self.privacy is None:
                A = whitened_rows(self._X, msg.centre, msg.scale, msg.L)
                M = A.T @ A
            else:
                stages = stage_releases(self.privacy)
                if not 1 <= msg.round <= len(stages):
                    raise ValueError(f"{self.label}: stage {msg.round} is not in the plan")
                rel = stages[msg.round - 1]
                M, event = whitened_moments_release(self._X, msg.centre, msg.scale, msg.L, rel.multiplier, self.rng,
                                                    self._split(rel))
                self.ledger.record(self.pid, event)
            values = upper_triangle(M) / float(self.n_total)
            req = msg
        elif kind == TableRequest.kind:
            req = TableRequest.decode(data)
            if self.plan is None:
                raise ValueError(f"{self.label}: a table request without the run's plan")
            if not any(w.startswith("stage") for w in self.answered):
                raise ValueError(f"{self.label}: a table request comes after the stages")
            refuse_unsafe(self.label, table_request_problem(req, self.plan))
            self._once("tables")
            values = self.plan.columns.tables(self._X, req.groups) / float(self.n_total)
        else:
            raise ValueError(f"{self.label}: fed-suffstats answers only a first request, basis broadcasts and a "
                             "table request")
        self.compute_s += time.perf_counter() - t0
        return ShareReply(req.round, self.pid, self.d, values).encode()


def make_suffstats_site(plan, pid: int, X: np.ndarray, rng) -> SuffstatsSite:
    return SuffstatsSite(pid, X, privacy=plan.privacy, rng=rng, label=plan.participants[pid].label, n_total=plan.n_total,
                         plan=plan)
