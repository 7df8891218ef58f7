"""``--method fed-suffstats``: private sufficient statistics in a few sum-shaped releases, then a
structure search that knows their noise (:mod:`bnsl_cli.solvers.suffstats`).

Everything a site sends is a share the coordinator only sums (:class:`ShareReply`, summable under
``bnsl serve --secure-sum`` and in process, see :class:`bnsl_cli.federated.secure_local.SecureLocalFleet`).

Private run (releases of :class:`~bnsl_cli.privacy.releases.ReleaseKind`; docs/privacy.md derives
the sensitivities):

1. ``scale-histogram`` — per column two histograms on fixed, data-independent log-spaced bins:
   of the row values (signed, quarter-octave bins) and of the absolute differences of consecutive
   row pairs (half-octave bins; pairs by row position, so no centre is needed). Replace-one changes
   one count in two bins of each histogram per column: L2 sensitivity ``2√d``. The coordinator
   zeroes the summed bins below ``3`` noise stds and takes medians: a centre ``m̃_j`` and a scale
   ``s̃_j = median|x − x'| / (√2·0.6745)`` (the standard deviation for Gaussian data); the centre
   is the midpoint of the values' quartiles. Nothing here
   can fail for lack of rows: a column without a bin above the noise keeps the public defaults
   ``m̃ = 0``, ``s̃ = 1`` and the report says so.
2. ``whitened-moments``, ``STAGES`` times — the coordinator broadcasts ``m̃``, ``s̃`` and a lower
   triangular ``L`` (public: post-processing of earlier releases; ``L = I`` first); each site
   releases ``Σ a aᵀ`` over its rows, ``a = [1; L⁻¹ (x − m̃)/s̃]`` clipped to ℓ₂ norm
   ``C = clip·√(d + 1)`` (replace-one sensitivity ``√2·C²``), plus symmetric Gaussian noise. The
   coordinator gets the weighted mean and second moments in the whitened basis, maps them back
   (``L · L⁻ᵀ``, then raw units), runs the noise-aware search, and turns the graph into the next
   stage's ``L``: the Cholesky factor of the model covariance ``(I − B)⁻ᵀ diag(R) (I − B)⁻¹``.
   Isotropic noise in a whitened basis enters the moments as ``L N Lᵀ``, nearly proportional to
   the covariance, like sampling noise; its small eigen-directions are no longer swamped. The
   next stage's centre is moved to the released weighted mean.

The graph of the last stage is the result (``W[i, j]`` is the edge ``i → j``, raw units).

Non-private run: one exchange of mean shares (``Σ x / n``), then one stage with ``m̃`` the pooled
mean, ``s̃ = 1``, ``L = I``, no clip, no noise: the exact pooled moments, the same search with τ = 0.
"""

from __future__ import annotations

import math
import time
from typing import Optional

import numpy as np

from bnsl_cli.dag import finish_graph
from bnsl_cli.errors import NoDagError, PrivacyBudgetError
from bnsl_cli.federated.messages import BasisBroadcast, FirstRequest, ShareReply, message_kind
from bnsl_cli.federated.outcome import SolverOutcome
from bnsl_cli.federated.share_site import ShareSite
from bnsl_cli.privacy.bounding import clamp_abs, clamp_rows, clip_factors, row_norms
from bnsl_cli.privacy.defaults import SUFFSTATS_HIST_SHARE, SUFFSTATS_STAGE_SHARES
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.mechanisms import gaussian_noise, symmetric_gaussian_matrix
from bnsl_cli.privacy.release_plan import fed_suffstats_releases
from bnsl_cli.privacy.releases import GAUSSIAN, ReleaseKind
from bnsl_cli.solvers.suffstats import learn_suffstats
from bnsl_cli.stats import check_scales, from_upper_triangle, standardized, sum_shares, upper_triangle

__all__ = [
    "HIST_SHARE",
    "STAGE_SHARES",
    "STAGES",
    "CLIP",
    "FirstRequest",
    "BasisBroadcast",
    "value_bins",
    "pair_bins",
    "scale_histograms",
    "centre_and_scale",
    "fed_suffstats_releases",
    "SuffstatsSite",
    "make_suffstats_site",
    "drive_suffstats",
    "model_whitening",
]

#: Share of ρ* spent on the scale histograms and the shares of the rest for the whitened-moment
#: stages (their calibration: :func:`bnsl_cli.privacy.release_plan.fed_suffstats_releases`).
HIST_SHARE = SUFFSTATS_HIST_SHARE
STAGE_SHARES = SUFFSTATS_STAGE_SHARES
STAGES = len(STAGE_SHARES)
#: Row clip of the moment releases: ``‖a‖ ≤ CLIP·√(d + 1)`` (about the median norm of a whitened row).
CLIP = 1.0
#: Histogram bins: values on quarter-octave bins over ``|x| ∈ [2^-RANGE, 2^RANGE]`` (both signs),
#: pair differences on half-octave bins over the same range; the end bins take everything beyond.
RANGE = 40
_V_STEPS = 4
_P_STEPS = 2
#: Summed bins below this many noise stds are taken as empty.
HIST_Z = 3.0


def value_bins() -> int:
    return 2 * (_V_STEPS * 2 * RANGE + 1) + 1


def pair_bins() -> int:
    return _P_STEPS * 2 * RANGE + 2


def _value_index(x: np.ndarray) -> np.ndarray:
    """Bin of each value: 0 for |x| < 2^-RANGE, ±(1 + k) for |x| in the k-th quarter octave above it."""
    a = np.abs(x)
    with np.errstate(divide="ignore"):
        k = np.floor(_V_STEPS * (np.log2(np.where(a > 0, a, 1.0)) + RANGE))
    k = np.clip(k, 0, _V_STEPS * 2 * RANGE).astype(np.int64)
    idx = np.where(a < 2.0**-RANGE, 0, (k + 1) * np.sign(x).astype(np.int64))
    return idx + (_V_STEPS * 2 * RANGE + 1)


def _value_of_bin(b: np.ndarray) -> np.ndarray:
    """Geometric middle of a value bin (0 for the zero bin)."""
    off = np.asarray(b) - (_V_STEPS * 2 * RANGE + 1)
    k = np.abs(off) - 1
    mag = 2.0 ** ((k + 0.5) / _V_STEPS - RANGE)
    return np.where(off == 0, 0.0, np.sign(off) * mag)


def _pair_index(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        k = np.floor(_P_STEPS * (np.log2(np.where(a > 0, a, 1.0)) + RANGE)) + 1
    k = np.where(a < 2.0**-RANGE, 0, k)
    return np.clip(k, 0, pair_bins() - 1).astype(np.int64)


def _pair_value(b: np.ndarray) -> np.ndarray:
    return 2.0 ** ((np.asarray(b) - 1 + 0.5) / _P_STEPS - RANGE)


def scale_histograms(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, pairs)``: per column the counts of the rows' values (``d × value_bins()``) and of
    the absolute differences of consecutive row pairs (``d × pair_bins()``)."""
    X = np.asarray(X, float)
    n, d = X.shape
    hv = np.zeros((d, value_bins()))
    iv = _value_index(X)
    for j in range(d):
        hv[j] = np.bincount(iv[:, j], minlength=value_bins())
    m = n // 2
    hp = np.zeros((d, pair_bins()))
    if m:
        ip = _pair_index(np.abs(X[0 : 2 * m : 2] - X[1 : 2 * m : 2]))
        for j in range(d):
            hp[j] = np.bincount(ip[:, j], minlength=pair_bins())
    return hv, hp


def _quantile_bin(h: np.ndarray, q: float) -> Optional[int]:
    tot = h.sum()
    if not tot > 0:
        return None
    return int(np.searchsorted(np.cumsum(h), q * tot))


#: Coarser resolutions tried, in bins merged, when single bins are lost in the noise.
MERGES = (1, 2, 4, 8, 16, 32, 64)


def _denoised(h: np.ndarray, noise_std: float, expected: float) -> tuple[Optional[np.ndarray], int]:
    """``(counts, f)``: the finest merge of ``f`` adjacent bins whose bins above ``HIST_Z`` noise
    stds (of the merged bin) hold at least half of the ``expected`` count, the others set to 0;
    ``(None, 0)`` when no resolution does."""
    for f in MERGES:
        m = -(-h.size // f) * f
        hf = np.concatenate([h, np.zeros(m - h.size)]).reshape(-1, f).sum(axis=1)
        keep = hf > HIST_Z * float(noise_std) * math.sqrt(f)
        if keep.any() and hf[keep].sum() >= 0.5 * expected:
            return np.where(keep, hf, 0.0), f
    return None, 0


def centre_and_scale(hv: np.ndarray, hp: np.ndarray, noise_std: float, n_values: Optional[float] = None,
                     n_pairs: Optional[float] = None) -> tuple[np.ndarray, np.ndarray, list]:
    """The centre and scale of every column from the summed noisy histograms (post-processing).

    Each histogram is read at the finest resolution (single bins, or 2, 4, … merged) whose bins
    above ``HIST_Z`` noise stds hold at least half of the rows (``n_values``, ``n_pairs``: the
    public counts; by default the noisy totals); the others are zeroed. The centre is the midpoint
    of the values' quartiles (well filled even for data centred at 0, where the log-spaced bins
    around the median are not), the scale comes from the median pair difference. Returns
    ``(m̃, s̃, defaulted)``: columns without a usable histogram keep the public defaults
    ``m̃ = 0`` / ``s̃ = 1`` and are listed."""
    d = hv.shape[0]
    m = np.zeros(d)
    s = np.ones(d)
    defaulted = []
    for j in range(d):
        ev = float(hv[j].sum()) if n_values is None else float(n_values)
        ep = float(hp[j].sum()) if n_pairs is None else float(n_pairs)
        hvj, fv = _denoised(hv[j], noise_std, ev)
        hpj, fp = _denoised(hp[j], noise_std, ep)
        ok = True
        if hvj is not None:
            lo, hi = _quantile_bin(hvj, 0.25), _quantile_bin(hvj, 0.75)
            m[j] = 0.5 * float(_value_of_bin(min(lo * fv + fv // 2, value_bins() - 1))
                               + _value_of_bin(min(hi * fv + fv // 2, value_bins() - 1)))
        else:
            ok = False
        if hpj is not None:
            bp = min(_quantile_bin(hpj, 0.5) * fp + fp // 2, pair_bins() - 1)
            if bp > 0:
                s[j] = float(_pair_value(bp)) / (math.sqrt(2.0) * 0.6745)
            else:
                ok = False
        else:
            ok = False
        if not ok:
            defaulted.append(j)
    return m, s, defaulted


# ----------------------------------------------------------------------------------------------
# the release list
# ----------------------------------------------------------------------------------------------


def release_builder(**_):
    """The registry's ``release_builder``: fed-suffstats' releases do not depend on the run's shape."""
    return fed_suffstats_releases


#: The report's ``privacy.mechanism``.
MECHANISM = (
    f"Gaussian releases of summed statistics: the scale histograms, then the clipped second moments in {STAGES} "
    "whitened stages; a noise-aware score search on them (post-processing)"
)


def _stage_releases(privacy) -> list:
    return [r for r in privacy.releases if r.kind == ReleaseKind.WHITENED_MOMENTS]


# ----------------------------------------------------------------------------------------------
# the broadcast of the basis
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# the site side
# ----------------------------------------------------------------------------------------------


def _symmetric_noise(d: int, std: float, rng) -> np.ndarray:
    return symmetric_gaussian_matrix(d, std, rng)


def _whitened_rows(X: np.ndarray, centre: np.ndarray, scale: np.ndarray, L: np.ndarray) -> np.ndarray:
    """``a = [1; L⁻¹ (x − m̃)/s̃]`` for every row (n × (d + 1))."""
    from scipy.linalg import solve_triangular

    Z = (X - centre[None, :]) / scale[None, :]
    Y = solve_triangular(L, Z.T, lower=True).T
    return np.hstack([np.ones((X.shape[0], 1)), Y])


def whitened_moments_release(X: np.ndarray, centre: np.ndarray, scale: np.ndarray, L: np.ndarray, multiplier: float,
                             rng, split: int = 1):
    """One private stage: ``Σ a aᵀ`` over the rows (clamped first, see :mod:`bnsl_cli.privacy.bounding`), each
    ``a`` clipped to ℓ₂ norm ``C = CLIP·√(d + 1)``, plus symmetric Gaussian noise of std ``multiplier·√2·C²``
    (``/√split``: this site's share under distributed noise). Returns the matrix and its ledger event."""
    d = X.shape[1]
    A = _whitened_rows(clamp_rows(X, centre, scale**2), centre, scale, L)  # bounding
    c = CLIP * math.sqrt(d + 1)
    A = clamp_abs(A)  # finite whatever row arrives; the clip factor is never 0·inf (bounding)
    A = A * clip_factors(row_norms(A), c)[:, None]
    sens = math.sqrt(2.0) * c**2
    std = multiplier * sens
    M = A.T @ A + _symmetric_noise(d + 1, std / math.sqrt(split), rng)
    return M, PrivacyEvent(ReleaseKind.WHITENED_MOMENTS, GAUSSIAN, sens, std, 1, split)


class SuffstatsSite(ShareSite):
    """A fed-suffstats participant. Answers a :class:`FirstRequest` (private: its share of the
    scale histograms; non-private: of the column means) and then every :class:`BasisBroadcast` with
    its share of the augmented second moments in that basis, each stage once."""

    def __init__(self, pid: int, X: np.ndarray, *, privacy=None, rng=None, label: Optional[str] = None,
                 n_total: Optional[int] = None):
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
        if privacy is not None:
            if rng is None:
                raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
            if len(_stage_releases(privacy)) != STAGES or privacy.multiplier(ReleaseKind.SCALE_HISTOGRAM) is None:
                raise PrivacyBudgetError(f"{self.label}: the plan does not calibrate fed-suffstats' releases")

    def _split(self, rel) -> int:
        return int(rel.split)

    def handle(self, data: bytes) -> Optional[bytes]:
        t0 = time.perf_counter()
        kind = message_kind(data)
        if kind == FirstRequest.kind:
            req = FirstRequest.decode(data)
            self._once("first")
            if self.privacy is None:
                values = self._X.sum(axis=0) / float(self.n_total)
            else:
                rel = next(r for r in self.privacy.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
                hv, hp = scale_histograms(self._X)
                sens = 2.0 * math.sqrt(self.d)
                std = rel.multiplier * sens
                flat = np.concatenate([hv.ravel(), hp.ravel()])
                values = (flat + gaussian_noise(flat.size, std / math.sqrt(self._split(rel)), self.rng)) / float(self.n_total)
                self.ledger.record(self.pid, PrivacyEvent(ReleaseKind.SCALE_HISTOGRAM, GAUSSIAN, sens, std, 1, self._split(rel)))
        elif kind == BasisBroadcast.kind:
            msg = BasisBroadcast.decode(data)
            if "first" not in self.answered:
                raise ValueError(f"{self.label}: a basis broadcast before the first request")
            if msg.d != self.d or not all(np.all(np.isfinite(v)) for v in (msg.centre, msg.scale, msg.L)) or not np.all(msg.scale > 0):
                raise ValueError(f"{self.label}: the basis broadcast is not usable")
            self._once(f"stage {msg.round}")
            if self.privacy is None:
                A = _whitened_rows(self._X, msg.centre, msg.scale, msg.L)
                M = A.T @ A
            else:
                stages = _stage_releases(self.privacy)
                if not 1 <= msg.round <= len(stages):
                    raise ValueError(f"{self.label}: stage {msg.round} is not in the plan")
                rel = stages[msg.round - 1]
                M, event = whitened_moments_release(self._X, msg.centre, msg.scale, msg.L, rel.multiplier, self.rng,
                                                    self._split(rel))
                self.ledger.record(self.pid, event)
            values = upper_triangle(M) / float(self.n_total)
            req = msg
        else:
            raise ValueError(f"{self.label}: fed-suffstats answers only a first request and basis broadcasts")
        self.compute_s += time.perf_counter() - t0
        return ShareReply(req.round, self.pid, self.d, values).encode()


def make_suffstats_site(plan, pid: int, X: np.ndarray, rng) -> SuffstatsSite:
    return SuffstatsSite(pid, X, privacy=plan.privacy, rng=rng, label=plan.participants[pid].label, n_total=plan.n_total)


# ----------------------------------------------------------------------------------------------
# the coordinator side
# ----------------------------------------------------------------------------------------------


def model_whitening(G: np.ndarray, W: np.ndarray, floor: float) -> np.ndarray:
    """The lower Cholesky factor of the model covariance ``(I − B)⁻ᵀ diag(R) (I − B)⁻¹`` of the DAG
    weights ``W`` (``B = W``, in the units of ``G``) with residual variances ``R`` read from ``G``,
    floored at ``floor`` (a direction the release could not resolve is not amplified)."""
    d = G.shape[0]
    M = np.eye(d) - W
    R = np.maximum(np.diag(M.T @ G @ M), floor)
    Minv = np.linalg.inv(M)
    S = Minv.T @ (R[:, None] * Minv)
    S = 0.5 * (S + S.T)
    try:
        return np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        return np.linalg.cholesky(S + floor * np.eye(d))


def _sum(raw) -> np.ndarray:
    return sum_shares(ShareReply.decode(r).values for r in raw)


def drive_suffstats(spec, plan, fleet, progress=None) -> SolverOutcome:
    """Coordinator side of fed-suffstats (see the module docstring)."""
    t_solve = 0.0
    d, n = plan.d, float(plan.n_total)
    fleet.traffic.enter("first")
    first = _sum(fleet.exchange(FirstRequest(0, d, d * (value_bins() + pair_bins()) if plan.private else d).encode()))
    notes: dict = {}
    if plan.private:
        pv = plan.privacy
        rel = next(r for r in pv.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
        # the noise of the sum: P shares of std/√split each (split = P − t: more than std when t > 0)
        share = rel.multiplier * 2.0 * math.sqrt(d) / math.sqrt(rel.split)
        std_sum = share * math.sqrt(plan.P)
        nv = d * value_bins()
        hv, hp = first[:nv].reshape(d, value_bins()) * n, first[nv:].reshape(d, pair_bins()) * n
        n_pairs = float(sum(p.rows // 2 for p in plan.participants))
        centre, scale, defaulted = centre_and_scale(hv, hp, std_sum, n, n_pairs)
        if defaulted:
            notes["scale_defaulted"] = [plan.names[j] for j in defaulted]
        stages = _stage_releases(pv)
    else:
        centre, scale = first, np.ones(d)
        stages = [None]
    L = np.eye(d)
    L_ok = None
    history = []
    W = np.zeros((d, d))
    for k, rel in enumerate(stages, start=1):
        fleet.traffic.enter(f"stage {k}")
        raw = fleet.exchange(BasisBroadcast(k, d, centre, scale, L).encode())
        t0 = time.perf_counter()
        M = from_upper_triangle(_sum(raw), d + 1) * n
        w0 = M[0, 0]
        std_sum = 0.0 if rel is None else rel.multiplier * math.sqrt(2.0) * (CLIP**2 * (d + 1)) * math.sqrt(plan.P / rel.split)
        if not (np.all(np.isfinite(M)) and w0 > 3.0 * std_sum and w0 > 0):
            # the rows' weight after the clip is lost in the noise: this basis whitened too hard
            # (post-processing of released values decides it); back to the last basis that worked
            if L_ok is None:
                raise NoDagError("fed-suffstats: the released moments are not usable (not finite, or no weight)")
            history.append({"round": k, "tau": None, "edges": None, "score": None, "weight": float(w0 / n),
                            "note": "the clipped rows' weight is within the noise; the previous basis is used next"})
            L = L_ok
            continue
        L_ok = L
        ybar = M[0, 1:] / w0
        Cy = M[1:, 1:] / w0 - np.outer(ybar, ybar)
        SL = scale[:, None] * L
        G = SL @ Cy @ SL.T  # raw units
        if rel is None:
            tau, H = 0.0, None
        else:
            tau = std_sum / w0
            H = SL @ SL.T
        sd = np.sqrt(np.maximum(np.diag(G), 0.0))
        mean = centre + scale * (L @ ybar)  # the released weighted mean, raw units
        if plan.standardize:
            # the search on the correlation matrix (quantised: a change of units moves only last bits)
            check_scales(mean, sd, plan.names)
            Gs, sd = standardized(G)
            res = learn_suffstats(Gs, n, tau, H=None if H is None else H / np.outer(sd, sd), knowledge=plan.knowledge)
            W = res.W * sd[None, :] / sd[:, None]  # raw units, for the next basis
        else:
            res = learn_suffstats(G, n, tau, H=H, knowledge=plan.knowledge)
            W = res.W
        history.append({"round": k, "tau": tau, "edges": int(res.E.sum()), "score": res.info.get("score"),
                        "weight": float(w0 / n)})
        if k < len(stages):
            # the next stage's basis: the centre moved to the released weighted mean, the whitening
            # of the model covariance (both post-processing of the releases)
            centre = mean
            Gz = L @ Cy @ L.T  # the moments in units of s̃
            Wz = W * scale[:, None] / scale[None, :]
            L = model_whitening(0.5 * (Gz + Gz.T), Wz, tau)
        t_solve += time.perf_counter() - t0
        if progress is not None:
            progress({"round": k, "h": 0.0, "edges": int(res.E.sum())})
    thr = plan.threshold if plan.threshold_given else 0.0
    if plan.standardize:  # the run reports standardised weights; the standardisation stage maps them back
        W = res.W
    Wf, removed = finish_graph(W, thr, spec.name, plan.names, plan.knowledge)
    summaries = fleet.finish()
    return SolverOutcome(
        W, Wf, summaries,
        rounds=len(stages),
        converged=True,
        timing={"compute_s": t_solve + sum(s["compute_s"] for s in summaries)},
        messages="sum-shaped exchanges only: " + ("the scale histograms, then the whitened moments per stage"
                                                 if plan.private else "the column-mean shares, then the moments"),
        warnings=[],
        final={"h": 0.0},
        history=history,
        removed_for_acyclicity=removed,
        solver_issues=[],
        suffstats={"centre": centre.tolist(), "scale": scale.tolist(), "stages": len(stages), **notes},
        standardize={
            "applied": bool(plan.standardize),
            "source": "the released moments (no extra message" + (", no extra release)" if plan.private else ")"),
            "mean": mean.tolist(),
            "sd": sd.tolist(),
        },
    )
