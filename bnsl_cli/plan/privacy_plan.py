"""The privacy part of a plan: :class:`PrivacyPlan` (the target, the options that shape the
releases, the verified release list) and :func:`resolve_privacy`, which builds it — what
``learn --dp`` runs and ``privacy-budget`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from bnsl_cli.errors import OptionError, PrivacyBudgetError
from bnsl_cli.federated.methods.registry import method_spec
from bnsl_cli.plan.options import DPConfig, _whole, check_dp
from bnsl_cli.privacy.accountant import validate_delta
from bnsl_cli.privacy.defaults import MEAN_SHARE, MOMENT_SHARE
from bnsl_cli.privacy.release_plan import calibrate_releases, ledger_of, spend_of
from bnsl_cli.privacy.releases import PlannedRelease, ReleaseKind

__all__ = ["PrivacyPlan", "resolve_privacy", "AUTO_STATIC_FROM_D"]

#: ``clip_levels="auto"`` uses adaptive clip levels below this many variables, static ones from it on.
AUTO_STATIC_FROM_D = 50


@dataclass(frozen=True)
class PrivacyPlan:
    """The privacy part of a plan: the target, the options that shape the releases, and the
    verified release list (one participant's releases; every participant makes the same)."""

    epsilon: float
    delta: float
    delta_given: bool
    conversion: str
    rho_target: float  # ρ* of (ε, δ)
    clip: float
    clip_levels: str  # resolved: adaptive | static (fed-sparse), row-l2 (fed-bnsl)
    selection_share: float
    mean_share: float
    moment_share: float
    polish_share: float
    public_means: bool
    value_bound: Optional[float]
    rounds: Optional[int]  # the K × T the DP-PGCD steps are planned for (None: no iterative release)
    steps: Optional[int]
    releases: tuple  # of PlannedRelease
    accountant: str = "zcdp"  # how the release list's spend is read (pld | zcdp)

    def multiplier(self, kind: ReleaseKind) -> Optional[float]:
        """Noise multiplier of the planned release ``kind`` (``None`` when not planned)."""
        for r in self.releases:
            if r.kind == kind:
                return r.multiplier
        return None

    def count(self, kind: ReleaseKind) -> int:
        return sum(r.count for r in self.releases if r.kind == kind)

    @property
    def rho(self) -> float:
        """Planned zCDP spend of one participant (all releases)."""
        return ledger_of(self.releases).max_rho()

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["releases"] = [r.to_dict() for r in self.releases]
        return d

    def summary(self) -> dict:
        """The plan as the report's ``privacy.plan`` and ``privacy-budget --json`` print it: the
        target, the budget split, the release list (the noise every release uses) and, by name, the
        multipliers and budgets read from that list."""
        K = ReleaseKind
        rel = self.releases
        sel = [r for r in rel if r.kind == K.SELECTION]
        upd = [r for r in rel if r.kind == K.UPDATE]
        eps_spent, rho_spent = self.spend()
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho_target,
            "conversion": self.conversion,
            "accountant": self.accountant,
            "rounds": self.rounds,
            "steps": self.steps,
            "selection_share": self.selection_share,
            "moment_share": self.moment_share,
            "mean_share": self.mean_share,
            "polish_share": self.polish_share,
            "releases": [r.to_dict() for r in rel],
            "rho_per_step": (sel[0].rho_each + upd[0].rho_each) if sel else None,
            "rho_selection_per_step": sel[0].rho_each if sel else None,
            "rho_update_per_step": upd[0].rho_each if upd else None,
            "rho_iterations": sum(r.rho for r in sel + upd) if sel else None,
            "selection_epsilon_per_step": 2.0 / sel[0].multiplier if sel else None,
            "rho_means": sum(r.rho for r in rel if r.kind in (K.RANGE_RAW, K.COLUMN_MEANS)),
            "rho_moments": sum(r.rho for r in rel if r.kind in (K.RANGE_CENTRED, K.SECOND_MOMENTS)),
            "rho_polish": sum(r.rho for r in rel if r.kind == K.POLISH),
            "rho_covariance": sum(r.rho for r in rel if r.kind == K.COVARIANCE),
            "gumbel_multiplier": self.multiplier(K.SELECTION),
            "sigma_multiplier": self.multiplier(K.UPDATE) or self.multiplier(K.COVARIANCE) or self.multiplier(K.MOMENT_MATRIX),
            "rho_moment_matrix": sum(r.rho for r in rel if r.kind == K.MOMENT_MATRIX),
            "moment_multiplier": self.multiplier(K.SECOND_MOMENTS),
            "mean_multiplier": self.multiplier(K.COLUMN_MEANS),
            "range_multipliers": {
                r.kind.value: r.multiplier for r in rel if r.kind in (K.RANGE_RAW, K.RANGE_CENTRED)
            },
            "polish_multiplier": self.multiplier(K.POLISH),
            "epsilon_planned": eps_spent,
            "rho_planned": rho_spent,
        }

    def spend(self) -> tuple[float, float]:
        """``(ε, ρ)`` of the whole release list, read from its ledger by the accountant."""
        return spend_of(self.releases, self.delta, self.conversion, self.accountant)

    @classmethod
    def from_dict(cls, d: dict) -> "PrivacyPlan":
        kw = dict(d)
        kw["releases"] = tuple(PlannedRelease.from_dict(r) for r in d["releases"])
        return cls(**kw)


def resolve_privacy(
    method: str,
    dp: DPConfig,
    *,
    delta: float,
    rounds: int,
    steps: int,
    polish: bool,
    d: Optional[int] = None,
    mean_share: Optional[float] = None,
    moment_share: Optional[float] = None,
) -> PrivacyPlan:
    """The privacy part of a plan for ``method``: the verified release list for (ε, δ) — what
    ``learn --dp`` runs and ``privacy-budget`` prints. ``mean_share``/``moment_share`` default to
    ``learn``'s (``MEAN_SHARE``, 0 with public means; ``MOMENT_SHARE``)."""
    spec = method_spec(method)
    if not spec.private:
        raise OptionError(f"--dp is not possible with --method {method}")
    check_dp(dp)  # callers bring DPConfigs nobody checked (privacy-budget, a site's policy)
    delta = validate_delta(delta)
    if mean_share is None:
        mean_share = 0.0 if dp.public_means else MEAN_SHARE
    if moment_share is None:
        moment_share = MOMENT_SHARE
    for name, v in (("the mean share", mean_share), ("the second-moment share", moment_share)):
        if not 0.0 <= v < 1.0:
            raise PrivacyBudgetError(f"{name} must lie in [0, 1), got {v!r}")
    if dp.public_means and mean_share:
        raise PrivacyBudgetError("public means make no mean release; the mean share must be 0")
    if moment_share <= 0:
        raise PrivacyBudgetError("the second-moment share must be > 0: the clip levels need the second moments")
    _whole("--rounds", rounds)
    _whole("--steps", steps)
    polish_share = float(dp.polish_share) if (polish and spec.polishable) else 0.0
    build = spec.release_builder(
        rounds=int(rounds), steps=int(steps), selection_share=float(dp.selection_share), mean_share=float(mean_share),
        moment_share=float(moment_share), polish_share=polish_share, value_bound_given=dp.value_bound is not None,
    )
    releases, rho_star = calibrate_releases(build, dp.epsilon, delta, dp.conversion, dp.accountant)
    iterative = any(r.kind == ReleaseKind.SELECTION for r in releases)
    levels = dp.clip_levels
    if not spec.one_matrix:  # DP-PGCD: clip levels per coordinate
        if levels == "auto" and d is not None:
            levels = "adaptive" if d < AUTO_STATIC_FROM_D else "static"
    else:
        levels = "row-l2"
    return PrivacyPlan(
        epsilon=float(dp.epsilon), delta=float(delta), delta_given=dp.delta is not None, conversion=dp.conversion,
        rho_target=float(rho_star), clip=float(dp.clip), clip_levels=levels,
        selection_share=float(dp.selection_share), mean_share=float(mean_share), moment_share=float(moment_share),
        polish_share=polish_share, public_means=bool(dp.public_means),
        value_bound=None if dp.value_bound is None else float(dp.value_bound),
        rounds=int(rounds) if iterative else None, steps=int(steps) if iterative else None,
        releases=tuple(releases), accountant=dp.accountant,
    )
