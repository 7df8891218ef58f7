"""What the sites of the pooled-statistics methods (one summed release per statistic) have in common:
each statistic's share leaves the site at most once, and the end-of-run summary (rows, compute
time, the ledger's events, the notes of its private preprocessing)."""

from __future__ import annotations

from bnsl_cli.errors import PrivacyBudgetError

__all__ = ["ShareSite"]


class ShareSite:
    """Base of a site that answers requests with shares of summed statistics.

    A subclass sets ``pid``, ``n_rows``, ``ledger``, ``answered`` (a set), ``compute_s``, ``notes``
    and ``who`` (how its errors name it) in its constructor."""

    report_B = False

    def _once(self, what: str) -> None:
        """Refuse to send the share ``what`` a second time (a second answer would be a second release)."""
        if what in self.answered:
            raise PrivacyBudgetError(f"{self.who}: its {what} share was already sent once")
        self.answered.add(what)

    def summary(self) -> dict:
        return {
            "participant": self.pid + 1,
            "rows": self.n_rows,
            "B": None,
            "compute_s": self.compute_s,
            "events": [ev.to_dict() for ev in self.ledger.events(self.pid)],
            "notes": dict(self.notes),
        }
