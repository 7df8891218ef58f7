"""Shared fixtures and helpers of the networked-run tests.

- ``certs``: one throwaway certificate set for the session (CA, coordinator, site1..site3), plus
  ``certs / "old"``: a site1 certificate that expired days ago, and ``certs / "other"``: a set from
  another CA;
- ``world`` (d = 10, 400 rows per site) and ``small_world`` (d = 6, 300 rows per site): three site
  CSVs each, made once per session;
- :class:`Party`, :func:`serve`, :func:`join`: ``bnsl serve`` / ``bnsl join`` as subprocesses
  (real mutual TLS on loopback), their output read as it comes;
- :func:`networked`: the coordinator's :class:`NetworkFleet` in this process and every site in a
  thread (real gRPC on loopback, no subprocess): the fast way to test the protocol.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

BNSL = [sys.executable, "-m", "bnsl_cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "200"}
for _name in [k for k in ENV if k.startswith("BNSL_")]:  # the tests say every option they mean
    del ENV[_name]
#: the files of an output folder: none may exist after a failed run
OUTS = ("adjacency.csv", "edges.csv", "graph.dot", "report.json")


# -- data and certificates (once per session) ----------------------------------------------------


def write_sites(root: Path, shards, names) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, X in enumerate(shards):
        p = root / f"site{k + 1}.csv"
        np.savetxt(p, X, delimiter=",", header=",".join(names), comments="", fmt="%.10g")
        paths.append(p)
    return paths


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Path:
    import datetime as dt

    from bnsl_cli.net.tls import make_certs

    root = tmp_path_factory.mktemp("certs")
    make_certs(root, ["coordinator", "site1", "site2", "site3"])
    make_certs(root / "old", ["site1"], days=1, not_before=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=5))
    make_certs(root / "other", ["site1"])
    return root


@pytest.fixture(scope="session")
def world(tmp_path_factory, certs):
    """``(certs, [site1.csv, site2.csv, site3.csv])``: d = 10, 400 rows per site."""
    from bnsl_cli.simulate import simulate

    sim = simulate(10, 10, participants=3, samples=400, seed=5)
    return certs, write_sites(tmp_path_factory.mktemp("shards"), sim.shards, sim.names)


@pytest.fixture(scope="session")
def small_world(tmp_path_factory, certs):
    """``(certs, [site1.csv, site2.csv, site3.csv])``: d = 6, 300 rows per site."""
    from tests._sim import simulated_tables

    sim, tabs = simulated_tables(6, 3, 300, 9)
    return certs, write_sites(tmp_path_factory.mktemp("small"), [t.X for t in tabs], sim.names)


#: variables and sites of :func:`site_tables`
D, P = 6, 3


@pytest.fixture(scope="session")
def site_tables():
    """Three in-memory sites (d = 6, 400 rows each; tables named site0..site2) for in-process runs."""
    from bnsl_cli.io.table import Table
    from tests._sim import simulated_tables

    _, t = simulated_tables(D, P, 400, 7)
    return [Table(x.X, x.names, f"site{k}") for k, x in enumerate(t)]


@pytest.fixture
def tables(site_tables):
    """:func:`site_tables`, checked to have the shape ``D, P`` the tests count on."""
    assert (site_tables[0].d, len(site_tables)) == (D, P)
    return site_tables


# -- parties as subprocesses ---------------------------------------------------------------------


def tls(certs: Path, party: str, ca_dir: Path | None = None) -> list[str]:
    c = ca_dir or certs
    return ["--ca", str(c / "ca.pem"), "--cert", str(c / f"{party}.pem"), "--key", str(c / f"{party}.key")]


class Party:
    """A ``bnsl`` subprocess whose stdout and stderr are read as they come (so a test can wait
    for a line, e.g. a progress line, before it acts)."""

    def __init__(self, args: list[str]):
        self.args = args
        env = ENV
        if args and args[0] == "join" and "--budget-ledger" not in args:
            # each site of a test is a fresh data set: its own budget ledger across runs (a test of the
            # ledger names one with --budget-ledger)
            import tempfile

            env = {**ENV, "BNSL_BUDGET_LEDGER": str(Path(tempfile.mkdtemp(prefix="bnsl-ledger-")) / "budget.jsonl")}
        self.proc = subprocess.Popen(BNSL + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self._out: list[str] = []
        self._err: list[str] = []
        self._pumps = [threading.Thread(target=self._pump, args=(s, sink), daemon=True)
                       for s, sink in ((self.proc.stdout, self._out), (self.proc.stderr, self._err))]
        for t in self._pumps:
            t.start()

    @staticmethod
    def _pump(stream, sink):
        for line in stream:
            sink.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        """Until ``text`` appears on stderr (AssertionError if the process ends or time runs out)."""
        end = time.monotonic() + timeout
        while text not in self.stderr:
            if self.proc.poll() is not None:
                time.sleep(0.1)  # the last lines
                if text in self.stderr:
                    return
                raise AssertionError(f"bnsl {self.args[0]} ended ({self.proc.returncode}) before {text!r}: {self.stderr}")
            if time.monotonic() > end:
                raise AssertionError(f"bnsl {self.args[0]}: no {text!r} within {timeout:g} s: {self.stderr}")
            time.sleep(0.02)

    def send_signal(self, sig) -> None:
        self.proc.send_signal(sig)

    def done(self, timeout: float = 60.0) -> tuple[int, str, str]:
        """``(exit code, stdout, stderr)`` once it ended (killed, and the test failed, after ``timeout``)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"bnsl {self.args[0]} still running after {timeout:g} s: {self.stderr}") from None
        for t in self._pumps:
            t.join(10)
        return self.proc.returncode, "".join(self._out), self.stderr


def serve(certs: Path, out: Path, *args: str, participants: int = 3, timeout: float = 20.0) -> tuple[Party, int]:
    """``bnsl serve`` on a free loopback port with mutual TLS, writing to ``out``; returns it and its port."""
    port_file = out.parent / (out.name + ".port")
    port_file.unlink(missing_ok=True)
    party = Party(["serve", "-P", str(participants), "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                   "--join-timeout", "40", "--timeout", f"{timeout:g}", "--out", str(out), *tls(certs, "coordinator"),
                   *args])
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if port_file.exists() and port_file.read_text().strip():
            return party, int(port_file.read_text())
        if party.proc.poll() is not None:
            raise AssertionError(f"serve exited early: {party.done()[2]}")
        time.sleep(0.05)
    party.proc.kill()
    raise AssertionError("serve did not start")


def join(certs: Path, port: int, csv: Path, party: str, *args: str, creds: list[str] | None = None) -> Party:
    """``bnsl join`` of ``csv`` as ``party`` (its certificate from ``certs`` unless ``creds``)."""
    return Party(["join", f"127.0.0.1:{port}", str(csv), *(creds if creds is not None else tls(certs, party)), *args])


def all_ok(coord: Party, sites: list[Party]) -> None:
    """Every site, then the coordinator, ended with exit code 0 (the failing party's stderr shown)."""
    for party in (*sites, coord):
        code, _, err = party.done()
        assert code == 0, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def no_outputs(out: Path) -> bool:
    return not out.exists() or not any((out / n).exists() for n in OUTS)


# -- parties in threads --------------------------------------------------------------------------


def quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


class Spy:
    """Wraps a fleet: records every list of replies the coordinator is handed (``handed``) and
    every MASKED frame body that arrived (``masked``: ``(site index, body)``)."""

    def __init__(self, fleet):
        from bnsl_cli.net import frames as F

        self.fleet, self.handed, self.masked = fleet, [], []
        orig_ex = fleet.exchange

        def observe(index, frame):
            if frame.kind == F.MASKED:
                self.masked.append((index, frame.body))

        def exchange(msg):
            out = orig_ex(msg)
            self.handed.append(out)
            return out

        fleet.frame_observers.append(observe)
        fleet.exchange = exchange


def networked(plan, tables, *, secure=True, bits=32, part_for=None, transcripts=None):
    """``run(plan)`` with the coordinator's fleet on loopback and one site per table in a thread.

    ``part_for(plan, index, X, rng)`` builds a site's participant (default: the run's own behind its SpendGuard);
    ``transcripts``: a list of paths, one per site, to write their transcripts to. The PLAN frame
    carries the real plan (``plan.to_dict()``). Returns ``(result or the BnslError that stopped
    the run, spy, {site: exception})``."""
    from bnsl_cli.errors import BnslError
    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.net.policy import SpendGuard
    from bnsl_cli.net.site import run_site
    from bnsl_cli.net.transcript import Transcript
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.federated.secure_sum import generate_keypair
    from bnsl_cli.run import participant_rngs, run

    keys = [generate_keypair() for _ in tables]
    rngs = participant_rngs(plan) if plan.private else [None] * plan.P
    fleet = NetworkFleet("127.0.0.1:0", plan.P, timeout=30, secure_sum=secure, scale_bits=bits)
    spy = Spy(fleet)
    errors, threads = {}, []
    # by default every site runs the run's participant behind the site's guard (as bnsl join does)
    make = part_for or (lambda plan, k, X, rng: SpendGuard(make_participant(plan, k, X, rng), plan))

    def site(k, t):
        tr = Transcript(transcripts[k]) if transcripts else None
        try:
            run_site(f"127.0.0.1:{fleet.port}",
                     {"site": f"site{k}", "columns": list(t.names), "rows": t.n, "x25519": keys[k][1].hex()},
                     lambda body: make(plan, body["index"], t.X, rngs[body["index"]]),
                     secure_key=keys[k][0], connect_timeout=5, timeout=30, transcript=tr)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors[k] = exc
        finally:
            if tr is not None:
                tr.close("ok" if k not in errors else f"stopped: {errors[k]}")

    for k, t in enumerate(tables):
        threads.append(threading.Thread(target=site, args=(k, t)))
        threads[-1].start()
    try:
        try:
            fleet.gather(30)
            spec = None
            if secure:
                spec = {"public_keys": [s.hello["x25519"] for s in fleet.sites], "run_id": os.urandom(16).hex(),
                        "scale_bits": bits}
            body = plan.to_dict()
            fleet.start(lambda i: {"plan": body, "index": i, "secure_sum": spec})
            result = quiet(run, plan, fleet)
            fleet.close(ok=True)
        except BnslError as exc:
            fleet.abort(f"the coordinator stopped: {exc}")
            result = exc
    finally:
        fleet.close()
        for th in threads:
            th.join(30)
            assert not th.is_alive()
    return result, spy, errors


def join_against(csv: Path, tmp_path: Path, join_args: list, plan_for, attack=None):
    """``bnsl join --insecure JOIN_ARGS`` of ``csv`` against a coordinator in this process (one site, real
    gRPC on loopback) that sends ``plan_for(shapes)`` (a :class:`RunPlan`), then runs ``attack(fleet, plan)``.
    Returns ``(hello, what the coordinator saw raised, the site's exit code, its stderr, its transcript
    records)``."""
    import json

    from bnsl_cli.io.csv_reader import read_table
    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.plan.shapes import ParticipantShape, Shapes

    tmp_path.mkdir(parents=True, exist_ok=True)
    fleet = NetworkFleet("127.0.0.1:0", 1, timeout=30)
    tpath = tmp_path / "site.transcript.jsonl"
    site = Party(["join", f"127.0.0.1:{fleet.port}", str(csv), "--insecure", *join_args,
                  "--transcript", str(tpath), "--timeout", "30"])
    raised = hello = None
    try:
        (hello,) = fleet.gather(30)
        t = read_table(csv)
        plan = plan_for(Shapes(tuple(t.names), (ParticipantShape(hello["site"], hello["rows"]),)))
        body = plan.to_dict()
        try:
            fleet.start(lambda i: {"plan": body, "index": i, "secure_sum": None})
            if attack is not None:
                attack(fleet, plan)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            raised = exc
    finally:
        fleet.close(ok=False)
    code, _, err = site.done(60)
    records = [json.loads(line) for line in tpath.read_text().splitlines()]
    return hello, raised, code, err, records

