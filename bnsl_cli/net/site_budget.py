"""A site's privacy budget across runs: the site's own ledger file, checked at every plan.

Each run's plan is checked against the site's per-run limit (``--max-epsilon``) by
:func:`~bnsl_cli.net.policy.check_plan`. Without more, anyone who can start runs gets a fresh budget
each time. So a site also keeps a ledger of every private plan it accepted — a JSON-lines file that
only the site writes (``bnsl join --budget-ledger``, default ``SITE.budget.jsonl`` beside the CSV; a
Flower site's ``STATE_DIR/budget.jsonl``) — and refuses a plan when the runs it accepted before and
this one, composed, exceed its total limit (``--max-total-epsilon``, node config
``max-total-epsilon``; default: the per-run limit, so a second full-budget run is refused).

The rule (docs/federation.md, "A site's budget across runs"):

* **What is composed:** every release of every private plan the site accepted (the plan's whole
  release list, counted when the plan is accepted, before any release is made — a run that stops
  early still counts in full, an upper bound) and this plan's releases.
* **Under which accountant:** this plan's (the report's: PLD by default, zCDP with
  ``--accountant zcdp``) and its ε ↔ δ conversion, read at the largest δ among the runs composed.
  The accountant composes the releases' privacy-loss distributions (or adds their ρ), so the total is
  the ε of one run that made all of those releases.
* **When:** after the per-run checks, under an exclusive lock on the file, so that two runs started at
  once cannot both take the last of the budget; the new record is written and ``fsync``ed before the
  site answers ACCEPT. Non-private runs are not recorded (their releases are not differentially
  private; ``--allow-non-private`` is the site's separate consent).

A ledger that cannot be read is a refusal: the site cannot know what it spent.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import Optional

from bnsl_cli.errors import RefusedError
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.privacy.release_plan import spend_of
from bnsl_cli.privacy.releases import PlannedRelease

__all__ = ["SiteBudget", "LEDGER_VERSION"]

LEDGER_VERSION = 1


class SiteBudget:
    """The site's ledger file ``path`` and its total limit ``max_total_epsilon``."""

    def __init__(self, path, max_total_epsilon: float):
        if not (isinstance(max_total_epsilon, (int, float)) and 0 < max_total_epsilon < math.inf):
            raise ValueError(f"max_total_epsilon must be a finite number > 0, got {max_total_epsilon!r}")
        self.path = Path(path)
        self.max_total_epsilon = float(max_total_epsilon)

    # -- reading ------------------------------------------------------------------------------
    def records(self) -> list[dict]:
        """The accepted plans on record, oldest first (refuses an unreadable ledger)."""
        if not self.path.exists():
            return []
        out = []
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RefusedError(f"this site cannot read its budget ledger {self.path} ({exc.strerror}); refused") from None
        for k, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if rec.get("version") != LEDGER_VERSION:
                    raise ValueError(f"version {rec.get('version')!r}")
                rec["releases"] = [PlannedRelease.from_dict(r) for r in rec["releases"]]
                rec["delta"] = float(rec["delta"])
            except (ValueError, KeyError, TypeError) as exc:
                raise RefusedError(
                    f"this site's budget ledger {self.path} is unreadable at line {k} ({exc}); refused: the site cannot "
                    "know what it spent"
                ) from None
            out.append(rec)
        return out

    def total(self, plan: Optional[RunPlan] = None, records: Optional[list] = None) -> tuple[float, float, float]:
        """``(ε, δ, ρ)`` of every run on record and ``plan`` (when given), composed (module docstring)."""
        records = self.records() if records is None else records
        releases = [r for rec in records for r in rec["releases"]]
        deltas = [rec["delta"] for rec in records]
        accountant, conversion = "pld", "tight"
        if plan is not None and plan.private:
            releases += list(plan.privacy.releases)
            deltas.append(float(plan.privacy.delta))
            accountant, conversion = plan.privacy.accountant, plan.privacy.conversion
        elif records:
            accountant, conversion = records[-1].get("accountant", "pld"), records[-1].get("conversion", "tight")
        if not releases:
            return 0.0, 0.0, 0.0
        delta = max(deltas)
        eps, rho = spend_of(releases, delta, conversion, accountant)
        return float(eps), delta, float(rho)

    # -- the check at a plan ------------------------------------------------------------------
    def admit(self, plan: RunPlan, site: str, note: Optional[dict] = None) -> dict:
        """Refuse ``plan`` if it takes the site beyond its total limit; else record it (before any
        release). Returns the running total after it (for the transcript). A non-private plan is
        neither checked nor recorded."""
        if not plan.private:
            return {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            records = self.records()
            before = self.total(None, records) if records else (0.0, 0.0, 0.0)
            eps, delta, rho = self.total(plan, records)
            if not eps <= self.max_total_epsilon * (1 + 1e-12):
                why = (f"the plan would take this site's total spend to ε = {eps:.4g} (δ = {delta:.3g}; {len(records)} "
                       f"earlier run(s) spent ε = {before[0]:.4g}), more than its --max-total-epsilon "
                       f"{self.max_total_epsilon:g}")
                err = RefusedError(f"{why} (ledger {self.path})")
                err.public_reason = why  # the coordinator is not told where the site keeps its ledger
                raise err
            pv = plan.privacy
            rec = {
                "version": LEDGER_VERSION, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "site": site,
                "method": plan.method, "epsilon": float(pv.epsilon), "delta": float(pv.delta),
                "accountant": pv.accountant, "conversion": pv.conversion,
                "rho": float(pv.spend()[1]), "releases": [r.to_dict() for r in pv.releases],
                "total_epsilon": eps, "total_delta": delta, **(note or {}),
            }
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        return {"total_epsilon": eps, "total_delta": delta, "total_rho": rho, "runs": len(records) + 1,
                "max_total_epsilon": self.max_total_epsilon, "budget_ledger": str(self.path)}

    @contextlib.contextmanager
    def _locked(self):
        import fcntl

        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
