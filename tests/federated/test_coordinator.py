"""The coordinator's W-step: both acyclicity functions, the screen, solver issues."""

import copy

import numpy as np
import pytest
import scipy.optimize

from bnsl_cli.dag import is_dag
from bnsl_cli.federated.methods.admm.coordinator import Coordinator
from bnsl_cli.federated.methods.admm.site import SparseParticipant
from bnsl_cli.federated.methods.admm.protocol import run_admm
from bnsl_cli.metrics import structure_metrics
from bnsl_cli.numerics import acyclicity_of
from tests._sim import simulated_tables


def _coordinator(d=6, P=3, seed=0, **kw):
    """A coordinator in the middle of a run: B_p near a cyclic target, some duals, α and ρ set."""
    rng = np.random.default_rng(seed)
    base = rng.normal(scale=0.8, size=(d, d)) * (rng.random((d, d)) < 0.4)
    np.fill_diagonal(base, 0)
    c = Coordinator(d, P, **kw)
    c.B = base[None] + 0.05 * rng.normal(size=(P, d, d)) * (base != 0)
    c.beta = 0.01 * rng.normal(size=(P, d, d)) * (base != 0)
    c.alpha, c.rho1, c.rho2 = 0.5, 2.0, 0.3
    return c


def _w_step(c: Coordinator) -> np.ndarray:
    """The W-step's solution, through the public round: with ``snap = 0`` and no forbidden entries,
    :meth:`Coordinator.step` keeps the W-step's answer as ``c.W``. The round counter is set so that
    the step solves at the tolerance of the coordinator's current round."""
    assert c.snap == 0 and c.forbidden is None
    c.round = max(c.round - 1, 0)
    c.step()
    return c.W


def _objective(c: Coordinator, W: np.ndarray) -> float:
    h = acyclicity_of(c.acyclicity, c.logdet_s)(W)[0]
    diff = c.B - W[None]
    return c.alpha * h + 0.5 * c.rho1 * h * h + float(np.sum(c.beta * diff)) + 0.5 * c.rho2 * float(np.sum(diff * diff))


@pytest.mark.parametrize("kind", ["expm", "logdet"])
@pytest.mark.parametrize("seed", range(3))
def test_w_step_reaches_the_minimum_a_reference_solver_finds(kind, seed):
    c = _coordinator(seed=seed, acyclicity=kind, ftol=1e-12, ftol_start=0.0, screen=0)
    d = c.d
    ref = copy.deepcopy(c)  # the W-step's problem, before the step updates the duals and penalties
    W = _w_step(c)
    c = ref
    assert np.isfinite(_objective(c, W))
    off = ~np.eye(d, dtype=bool)

    def ref_fun(w):
        Wf = np.zeros((d, d))
        Wf[off] = w
        f = _objective(c, Wf)
        return f if np.isfinite(f) else 1e30

    # the reference: SciPy's L-BFGS-B with numerical gradients on all off-diagonal entries,
    # started from the W-step's answer and from 0 (the lower of the two)
    best = min(
        scipy.optimize.minimize(ref_fun, x0, method="L-BFGS-B", options={"ftol": 1e-14, "gtol": 1e-10}).fun
        for x0 in (W[off], np.zeros(off.sum()))
    )
    assert _objective(c, W) <= best + 1e-6 * max(1.0, abs(best))


def test_logdet_w_step_stays_inside_its_domain_when_the_target_is_outside():
    c = Coordinator(3, 2, acyclicity="logdet", screen=0)
    target = np.zeros((3, 3))
    target[0, 1], target[1, 0] = 1.5, 1.2  # (W∘W) has spectral radius 1.8 > s = 1
    c.B = np.stack([target, target])
    c.alpha, c.rho1, c.rho2 = 0.1, 0.1, 1.0
    assert acyclicity_of("logdet")(target)[0] == float("inf")
    W = _w_step(c)
    h = acyclicity_of("logdet")(W)[0]
    assert np.isfinite(h) and h > 0
    assert W[0, 1] * W[1, 0] > 0.5  # moved towards the target, stopped before the barrier
    assert not c.solver_issues


def test_a_capped_solve_is_recorded_in_solver_issues():
    c = _coordinator(maxiter=1, screen=0)
    c.step()
    assert c.solver_issues and c.solver_issues[0]["round"] == 1
    assert c.solver_issues[0]["nit"] == 1 and "maxiter" in c.solver_issues[0]["message"]
    ok = _coordinator(screen=0)
    ok.step()
    assert ok.solver_issues == []


def test_the_screen_holds_small_targets_at_zero():
    d = 4
    c = Coordinator(d, 2, screen=0.01)
    B = np.zeros((d, d))
    B[0, 1], B[1, 2] = 0.8, 0.005  # the second is below the screen
    c.B = np.stack([B, B])
    c.alpha, c.rho1, c.rho2 = 0.1, 0.1, 1.0
    W = _w_step(c)
    assert W[0, 1] == pytest.approx(0.8, abs=1e-3) and W[1, 2] == 0.0 and c.screened == 1
    open_ = Coordinator(d, 2, screen=0)
    open_.B, open_.alpha, open_.rho1, open_.rho2 = c.B, 0.1, 0.1, 1.0
    assert _w_step(open_)[1, 2] == pytest.approx(0.005, abs=1e-4)
    # an entry already non-zero in W is never screened out
    c = Coordinator(d, 2, screen=0.01)
    c.B, c.alpha, c.rho1, c.rho2 = open_.B, 0.1, 0.1, 1.0
    c.W = np.zeros((d, d))
    c.W[1, 2] = 0.3
    assert _w_step(c)[1, 2] != 0.0 and c.screened == 0
    # default: snap / 5
    assert Coordinator(d, 2, snap=0.05).screen == pytest.approx(0.01)


def test_bad_options_are_value_errors():
    with pytest.raises(ValueError, match="acyclicity"):
        Coordinator(3, 2, acyclicity="trace")
    with pytest.raises(ValueError, match="logdet_s"):
        Coordinator(3, 2, acyclicity="logdet", logdet_s=0.0)


@pytest.mark.parametrize("kind", ["expm", "logdet"])
def test_a_small_federated_run_recovers_the_dag_with_either_function(kind):
    sim, tables = simulated_tables(8, 3, 1000, seed=3)
    n = sum(t.n for t in tables)
    parts = [SparseParticipant(k, t.X - t.X.mean(axis=0), n, 0.005, 24, 1e-5) for k, t in enumerate(tables)]
    coord = Coordinator(8, 3, snap=0.05, acyclicity=kind)
    log = run_admm(coord, [p.handle for p in parts], 80)
    W = coord.W * (np.abs(coord.W) > 0.3)
    assert is_dag(W)
    m = structure_metrics(W, sim.W)
    assert m["shd"] <= 2 and m["tpr"] >= 0.85
    assert coord.lbfgs_evals > log.rounds  # every round evaluated h at least once
    assert coord.solver_issues == []


def test_the_cli_passes_acyclicity_to_the_coordinator_and_rejects_unknown_names(tmp_path):
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from bnsl_cli.cli.app import app

    shards = Path(__file__).resolve().parents[2] / "examples" / "tiny" / "shards"
    runner = CliRunner()
    bad = runner.invoke(app, ["learn", str(shards), "--acyclicity", "trace"])
    assert bad.exit_code == 2 and "--acyclicity" in bad.output
    ok = runner.invoke(app, ["learn", str(shards), "--acyclicity", "logdet", "--seed", "0", "--out", str(tmp_path / "o")])
    assert ok.exit_code == 0, ok.output
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["options"]["acyclicity"] == "logdet"


@pytest.mark.parametrize("method", ["fed-bnsl", "fed-moments", "notears", "local-notears"])
def test_logdet_is_refused_where_the_method_does_not_use_it(method):
    from bnsl_cli.errors import OptionError
    from bnsl_cli.plan.options import LearnConfig

    with pytest.raises(OptionError, match="--acyclicity logdet works with --method fed-sparse only"):
        LearnConfig(method=method, acyclicity="logdet").check()
    LearnConfig(method="fed-sparse", acyclicity="logdet").check()


def test_the_w_step_tolerance_tightens_geometrically_to_ftol():
    c = Coordinator(4, 2, ftol=1e-6, ftol_start=1e-4, ftol_decay=0.5)
    seen = []
    for k in range(1, 12):
        c.round = k
        seen.append(c.round_ftol())
    assert seen[0] == pytest.approx(1e-4) and seen[1] == pytest.approx(5e-5)
    assert all(b <= a for a, b in zip(seen, seen[1:]))
    assert seen[-1] == 1e-6  # floored at ftol (1e-4 · 0.5^10 < 1e-6)
    off = Coordinator(4, 2, ftol=1e-6, ftol_start=0.0)
    off.round = 1
    assert off.round_ftol() == 1e-6


def test_the_screen_rises_to_the_snap_only_when_a_cyclic_block_is_wide():
    # a 12-cycle of weak consensus targets (|c| = 0.03: above snap/5, below the snap) plus one strong
    # edge: the weak entries form one cyclic block of 12 nodes
    d, P = 12, 2
    B = np.zeros((d, d))
    for i in range(d):
        B[i, (i + 1) % d] = 0.03
    B[0, 5] = 0.8

    def run(**kw):
        # snap 0.05's screens (screen = snap / 5, wide screen = snap) with the snap itself left out,
        # so that the W-step's answer is seen before snapping
        c = Coordinator(d, P, snap=0.0, screen=0.01, wide_screen=0.05, acyclicity="logdet", **kw)
        assert Coordinator(d, P, snap=0.05).screen == c.screen and Coordinator(d, P, snap=0.05).wide_screen == c.wide_screen
        c.B = np.stack([B, B])
        c.alpha, c.rho1, c.rho2 = 0.1, 1.0, 1.0
        before = c.screened
        c.round = 1
        W = _w_step(c)
        return c, W, c.screened - before

    wide, W_wide, held_wide = run(wide_block=10)
    narrow, W_narrow, held_narrow = run(wide_block=13)
    assert wide.wide_rounds == 1 and narrow.wide_rounds == 0
    assert held_wide == d and held_narrow == 0  # the twelve weak entries held at 0, or none
    assert W_wide[0, 5] == pytest.approx(W_narrow[0, 5], abs=1e-3) and W_wide[0, 5] > 0.7
    assert np.all(np.abs(W_narrow[np.abs(B) == 0.03]) < 0.05)  # their optimum lies below the snap anyway
    assert not np.any(W_wide[np.abs(B) == 0.03])


def test_a_screen_turned_off_stays_off_on_wide_blocks():
    d, P = 12, 2
    B = np.zeros((d, d))
    for i in range(d):
        B[i, (i + 1) % d] = 0.03
    c = Coordinator(d, P, snap=0.05, screen=0.0, wide_block=2)
    c.B = np.stack([B, B])
    c.alpha, c.rho1, c.rho2 = 0.1, 1.0, 1.0
    c.round = 1
    c.step()
    assert c.wide_rounds == 0 and c.screened == 0


def test_private_fed_sparse_coordinator_has_no_screen_and_no_tolerance_schedule():
    """Under --dp the W-step runs without the non-private speed devices (admm.coordinator_for):
    no screen, a fixed tolerance from round 1. Non-private fed-sparse keeps both."""
    from bnsl_cli.federated.methods.registry import method_spec
    from bnsl_cli.federated.methods.admm import coordinator_for
    from bnsl_cli.plan.options import DPConfig, LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes
    from tests._sim import simulated_tables

    _, tables = simulated_tables(6, 2, 500, seed=0)
    shapes = Shapes.of_tables(tables)
    spec = method_spec("fed-sparse")
    private = coordinator_for(spec, RunPlan.resolve(LearnConfig(method="fed-sparse", seed=0, dp=DPConfig(epsilon=5.0)), shapes))
    plain = coordinator_for(spec, RunPlan.resolve(LearnConfig(seed=0), shapes))
    assert private.screen == 0.0 and private.round_ftol() == private.ftol
    assert plain.screen > 0.0 and plain.round_ftol() > plain.ftol
