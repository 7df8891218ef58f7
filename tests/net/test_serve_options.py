"""``bnsl serve`` offers ``bnsl learn``'s options: every one of them is classified (run plan, output,
or only where the rows are), every run option reaches the plan the sites receive, every output
option is honoured, and the others are refused with a clear usage error.

The coordinator's network is replaced by an in-process fleet (:class:`LoopbackFleet`): the same
``bnsl serve`` code path from option parsing to the written outputs, in milliseconds."""

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.cli import learn as learn_cli  # noqa: E402
from bnsl_cli.cli import serve as serve_cli  # noqa: E402
from bnsl_cli.errors import BnslError  # noqa: E402
from bnsl_cli.io.csv_reader import read_table  # noqa: E402

#: a value different from the default for every RUN option (extra options it needs to matter in
#: the plan; private options are compared with the same private baseline)
DATA = Path(__file__).resolve().parents[1] / "data"
CHANGES = {
    "method": ["--method", "fed-bnsl"],
    "lam": ["--lambda", "0.07"],
    "threshold": ["--threshold", "0.25"],
    "rounds": ["--rounds", "7"],
    "steps": ["--steps", "5"],
    "rho1": ["--rho1", "0.01"],
    "rho2": ["--rho2", "0.01"],
    "rho1_growth": ["--rho1-growth", "2.0"],
    "rho2_growth": ["--rho2-growth", "1.5"],
    "snap": ["--snap", "0.02"],
    "acyclicity": ["--acyclicity", "expm"],
    "polish": ["--no-polish"],
    "standardize": ["--standardize"],
    "seed": ["--seed", "11"],
    "personal": ["--personal"],
    "trace": ["--trace"],
    "dp": ["--dp", "--epsilon", "5"],
    "require": ["--require", "x01->x02"],
    "forbid": ["--forbid", "x01->x02"],
    "knowledge_file": ["--knowledge", str(DATA / "knowledge_x01_x02.txt")],
    "require_file": ["--require-file", str(DATA / "arcs_x01_x02.csv")],
    "forbid_file": ["--forbid-file", str(DATA / "arcs_x01_x02.csv")],
}
PRIVATE = ["--dp", "--epsilon", "5"]
PRIVATE_CHANGES = {
    "epsilon": ["--epsilon", "3"],
    "delta": ["--delta", "1e-7"],
    "clip": ["--clip", "2.0"],
    "selection_share": ["--selection-share", "0.4"],
    "polish_share": ["--polish-share", "0.2"],
    "conversion": ["--conversion", "simple"],
    "accountant": ["--accountant", "zcdp"],
    "public_means": ["--public-means"],
    "value_bound": ["--value-bound", "20"],
    "clip_levels": ["--clip-levels", "static"],
    "noise": ["--method", "fed-suffstats", "--secure-sum", "--noise", "per-site"],
    "collusion_tolerance": ["--method", "fed-suffstats", "--secure-sum", "--collusion-tolerance", "1"],
}
#: edge confidence: over the network only a private run's releases are resampled (at the coordinator)
CONFIDENCE_CHANGES = {
    "bootstrap": ["--bootstrap", "5"],
    "min_strength": ["--bootstrap", "5", "--min-strength", "0.7"],
}


class Stop(BnslError):
    """Raised by the fake fleet once it holds the plan (exit code 1, one line)."""


class LoopbackFleet:
    """Stands in for :class:`~bnsl_cli.net.fleet.NetworkFleet` inside ``bnsl serve``:
    the sites are this process's participants on ``tables`` (an in-process fleet). ``stop_at_plan``:
    raise :class:`Stop` once the plan is known (it is kept in ``LoopbackFleet.plans``)."""

    tables: list = []
    plans: list = []
    stop_at_plan = True

    def __init__(self, listen, n_sites, credentials=None, timeout=120.0, log=None, handshake_timeout=10.0,
                 max_pending=64, allow_sites=None, *, secure_sum=False, scale_bits=32):
        assert n_sites == len(self.tables)
        self.port, self.workers, self.secure_sum, self.scale_bits = 7443, 1, secure_sum, scale_bits
        self.sites, self.inner, self.closed = [], None, None

    def gather(self, join_timeout):
        from types import SimpleNamespace

        self.sites = [SimpleNamespace(index=k, name=f"site{k + 1}.csv", peer="ipv4:127.0.0.1:1",
                                      hello={"site": f"site{k + 1}.csv", "columns": list(t.names), "rows": t.n,
                                             "x25519": "00" * 32})
                      for k, t in enumerate(self.tables)]
        return [s.hello for s in self.sites]

    def start(self, plan_for):
        from bnsl_cli.federated.fleet import LocalFleet
        from bnsl_cli.federated.methods.registry import make_participant
        from bnsl_cli.plan.run_plan import RunPlan
        from bnsl_cli.run import participant_rngs

        bodies = [plan_for(k) for k in range(len(self.tables))]
        LoopbackFleet.plans.append(bodies[0]["plan"])
        if self.stop_at_plan:
            raise Stop("stopped at the plan (test)")
        plan = RunPlan.from_dict(bodies[0]["plan"])
        rngs = participant_rngs(plan) if plan.private else [None] * plan.P
        self.inner = LocalFleet([make_participant(plan, k, t.X, rngs[k]) for k, t in enumerate(self.tables)])

    def __len__(self):
        return len(self.tables)

    @property
    def traffic(self):
        """The byte meter of the in-process fleet that carries the messages."""
        return self.inner.traffic

    def exchange(self, msg):
        return self.inner.exchange(msg)

    def finish(self):
        return self.inner.finish()

    def abort(self, reason):
        pass

    def close(self, ok=False):
        self.closed = ok


@pytest.fixture
def loopback(world, monkeypatch):
    import bnsl_cli.net.fleet as fleet_mod

    _, paths = world
    monkeypatch.setattr(LoopbackFleet, "tables", [read_table(p) for p in paths])
    monkeypatch.setattr(LoopbackFleet, "plans", [])
    monkeypatch.setattr(LoopbackFleet, "stop_at_plan", True)
    monkeypatch.setattr(fleet_mod, "NetworkFleet", LoopbackFleet)
    for var in ("BNSL_EPSILON", "BNSL_DELTA", "BNSL_SEED", "BNSL_METHOD", "BNSL_ROUNDS", "BNSL_QUIET"):
        monkeypatch.delenv(var, raising=False)
    return LoopbackFleet


def _serve(*args, env=None):
    from bnsl_cli.cli.app import build_app

    return CliRunner().invoke(build_app({"serve"}), ["serve", "-P", "3", "--insecure", "--listen", "127.0.0.1:0", *args],
                              env=env)


def _plan_with(loopback, *args) -> dict:
    before = len(loopback.plans)
    res = _serve("-q", *args)
    assert res.exit_code == 1 and "stopped at the plan (test)" in res.output, res.output
    assert len(loopback.plans) == before + 1
    return loopback.plans[-1]


def _learn_parameters() -> list[str]:
    return list(inspect.signature(learn_cli.command).parameters)


def test_every_learn_parameter_is_classified_once():
    groups = [serve_cli.RUN_OPTIONS, serve_cli.OUTPUT_OPTIONS, serve_cli.COLUMN_OPTIONS, serve_cli.NOT_HERE, serve_cli.CONTEXT_PARAMETERS]
    for name in _learn_parameters():
        homes = [g for g in groups if name in g]
        assert len(homes) == 1, f"bnsl learn's {name!r} is classified {len(homes)} times in serve.py (must be once)"
    # and nothing is classified that learn does not have (a stale entry would hide a rename)
    assert set().union(*groups) == set(_learn_parameters())
    # this test covers every run option
    assert set(CHANGES) | set(PRIVATE_CHANGES) | set(CONFIDENCE_CHANGES) == serve_cli.RUN_OPTIONS


def test_serve_offers_every_run_and_output_option_and_no_site_option():
    params = set(inspect.signature(serve_cli.command).parameters)
    assert serve_cli.RUN_OPTIONS | serve_cli.OUTPUT_OPTIONS <= params
    from bnsl_cli.cli.app import build_app

    res = CliRunner().invoke(build_app({"serve"}), ["serve", "--help"], env={"COLUMNS": "250"})
    assert res.exit_code == 0
    for option in ("--sep", "--files-from", "--workers"):
        assert option not in res.output
    for option in ("--lambda", "--polish-share", "--clip-levels", "--out", "--force", "--json"):
        assert option in res.output


@pytest.mark.parametrize("args, where", [
    (["--sep", ";"], "bnsl join --sep"),
    (["--workers", "2"], "each site is one participant process"),
    (["--files-from", "list.txt"], "bnsl join HOST:PORT SITE.csv"),
])
def test_site_options_are_a_usage_error(loopback, args, where):
    res = _serve(*args)
    assert res.exit_code == 2 and "belongs where the rows are" in res.output and where in res.output
    assert not loopback.plans


def test_shard_arguments_are_a_usage_error(loopback):
    res = _serve("site1.csv")
    assert res.exit_code == 2 and not loopback.plans


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_each_run_option_reaches_the_plan(loopback, name):
    base = _plan_with(loopback)
    changed = _plan_with(loopback, *CHANGES[name])
    assert changed != base, f"serve ignored --{name}"


@pytest.mark.parametrize("name", sorted(PRIVATE_CHANGES))
def test_each_private_option_reaches_the_plan(loopback, name):
    change = PRIVATE_CHANGES[name]
    # the method whose option it is (fed-sparse's unless the change names one): the same in both plans
    method = change[change.index("--method") + 1] if "--method" in change else "fed-sparse"
    secure = ["--secure-sum"] if "--secure-sum" in change else []  # distributed noise needs it: in both plans
    base = _plan_with(loopback, *PRIVATE, "--method", method, *secure)
    changed = _plan_with(loopback, *PRIVATE, "--method", method, *change)
    assert changed["privacy"] != base["privacy"], f"serve ignored --{name}"


@pytest.mark.parametrize("name", sorted(CONFIDENCE_CHANGES))
def test_each_confidence_option_reaches_the_plan(loopback, name):
    base = _plan_with(loopback, *PRIVATE, "--method", "fed-suffstats", "--bootstrap", "3")
    changed = _plan_with(loopback, *PRIVATE, "--method", "fed-suffstats", *CONFIDENCE_CHANGES[name])
    assert changed != base and changed["privacy"] == base["privacy"], f"serve ignored --{name}"


def test_non_private_bootstrap_starts_with_a_replicate_session(loopback):
    # without --dp the sites resample their own rows: the first session is replicate 1 of 5, and the plan carries
    # no stream (each site draws its own; --seed does not reach the sites' resampling)
    _serve("-q", "--bootstrap", "5", "--seed", "9")
    first = loopback.plans[-1]
    assert first["replicate"] == 0 and first["bootstrap"] == 5
    assert not any("entropy" in key or "stream" in key for key in first)
    # a private run resamples its releases at the coordinator: one session, the plan as it is
    private = _plan_with(loopback, *PRIVATE, "--method", "fed-suffstats", "--bootstrap", "5")
    assert "replicate" not in private


def _splits(plan: dict) -> set:
    return {int(r.get("split", 1)) for r in plan["privacy"]["releases"]}


def test_fed_suffstats_noise_is_distributed_only_under_a_secure_sum(loopback):
    base = [*PRIVATE, "--method", "fed-suffstats"]
    assert _splits(_plan_with(loopback, *base, "--secure-sum")) == {3}
    assert _splits(_plan_with(loopback, *base, "--secure-sum", "--collusion-tolerance", "1")) == {2}
    assert _splits(_plan_with(loopback, *base, "--secure-sum", "--noise", "per-site")) == {1}
    assert _splits(_plan_with(loopback, *base)) == {3}  # the default (issue 27): distributed under the secure sum
    assert _splits(_plan_with(loopback, *base, "--no-secure-sum")) == {1}  # every site adds all of the noise
    res = _serve("-q", *base, "--no-secure-sum", "--noise", "distributed")
    assert res.exit_code == 2 and "--no-secure-sum" in res.output


def test_epsilon_from_the_environment_does_not_concern_a_non_private_run(loopback):
    res = _serve("-q", env={"BNSL_EPSILON": "3"})
    assert "stopped at the plan" in res.output and loopback.plans[-1]["privacy"] is None
    res = _serve("-q", "--epsilon", "3")  # given on the command line without --dp it is an error, as in learn
    assert res.exit_code == 2 and "--epsilon given without --dp" in res.output


def test_bad_option_values_are_checked_before_anyone_joins(loopback):
    res = _serve("--snap", "-1")
    assert res.exit_code == 2 and "--snap" in res.output and not loopback.plans


def test_output_options_are_honoured(loopback, tmp_path):
    # five rounds: the outputs, not the learning, are under test
    loopback.stop_at_plan = False
    out, adj, edges = tmp_path / "out", tmp_path / "adj.csv", tmp_path / "edges.csv"
    res = _serve("--seed", "3", "--rounds", "5", "--out", str(out), "--adjacency", str(adj), "--edges", str(edges), "--json", "-q")
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} >= {"adjacency.csv", "edges.csv", "graph.dot", "report.json"}
    assert adj.read_bytes() == (out / "adjacency.csv").read_bytes()
    assert edges.read_bytes() == (out / "edges.csv").read_bytes()
    rep = json.loads(res.stdout[res.stdout.index("{"):])
    assert rep["network"]["sites"][0]["site"] == "site1.csv" and rep["seed"] == 3
    assert "round   1:" not in res.output  # --quiet
    # --force: a folder holding a file bnsl did not write is refused without it, used with it
    other = tmp_path / "busy"
    other.mkdir()
    (other / "edges.csv").write_text("mine\n")
    res = _serve("--seed", "3", "--rounds", "5", "--out", str(other), "-q")
    assert res.exit_code == 2 and "--force" in res.output
    res = _serve("--seed", "3", "--rounds", "5", "--out", str(other), "-q", "--force")
    assert res.exit_code == 0 and (other / "report.json").exists()
    # without --quiet the progress lines appear; without --out the edge list goes to stdout
    res = _serve("--seed", "3", "--rounds", "5")
    assert res.exit_code == 0 and "round   1:" in res.output and "source,target,weight" in res.output
    W = np.loadtxt(out / "adjacency.csv", delimiter=",", skiprows=1, usecols=range(1, 11))
    assert np.count_nonzero(W) >= 2
