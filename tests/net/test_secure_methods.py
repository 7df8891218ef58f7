"""Secure aggregation for every method: networked runs on loopback (3 sites, real gRPC, the sites in
threads and one run with subprocesses) equal the in-process run up to the fixed-point rounding, and
the coordinator only ever holds sums of the summable replies. (Helpers and fixtures: conftest.py.)
"""

import json

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.federated.messages import HEADER  # noqa: E402
from bnsl_cli.net.common import FederationError  # noqa: E402
from bnsl_cli.federated.methods.registry import make_participant, method_spec  # noqa: E402
from bnsl_cli.federated.secure_sum import ALL_SITES, SecureSumRangeError, summable_span  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from bnsl_cli.learn import learn  # noqa: E402
from bnsl_cli.run import participant_rngs, run  # noqa: E402
from tests.net.conftest import D, P, all_ok, join, networked, quiet, serve  # noqa: E402


class Recording:
    """An in-process fleet that records the replies of every exchange."""

    def __init__(self, plan, tables):
        from bnsl_cli.federated.fleet import LocalFleet

        rngs = participant_rngs(plan) if plan.private else [None] * plan.P
        self.inner = LocalFleet([make_participant(plan, k, t.X, rngs[k]) for k, t in enumerate(tables)])
        self.handed, self.workers, self.secure_sum = [], 1, False
        self.traffic = self.inner.traffic  # the inner fleet carries (and counts) the messages

    def __len__(self):
        return len(self.inner)

    def exchange(self, msg):
        out = self.inner.exchange(msg)
        self.handed.append(out)
        return out

    def finish(self):
        return self.inner.finish()

    def close(self):
        self.inner.close()


CASES = {
    "fed-sparse-standardize": LearnConfig(method="fed-sparse", standardize=True, rounds=15),
    "fed-bnsl": LearnConfig(method="fed-bnsl", rounds=30),
    "fed-moments": LearnConfig(method="fed-moments"),
    "fed-sparse-dp": LearnConfig(method="fed-sparse", rounds=6, dp=DPConfig(epsilon=8, value_bound=20.0), seed=4),
    "fed-bnsl-dp-standardize": LearnConfig(method="fed-bnsl", rounds=20, standardize=True, dp=DPConfig(epsilon=20), seed=4),
    "fed-moments-dp": LearnConfig(method="fed-moments", dp=DPConfig(epsilon=8), seed=4),
}
#: The largest weight difference allowed. The sums themselves agree to the fixed-point bound
#: (checked exactly below on the first summed exchange). ADMM fed with B̄ every round (fed-bnsl)
#: or only the polish's moments (fed-sparse --dp) carries the rounding through its warm-started,
#: tightly converged steps: 1e-6 (measured 2.5e-10 to 4.3e-10). Two inputs amplify it: rows
#: standardised with the pooled statistics (a 1e-10 change of μ, σ moved 10 of the 7200
#: standardised values by one 2^-24 quantum; fed-sparse's consensus then moved by 4.4e-4, the
#: polished weights by 5e-10) and NOTEARS on S (in process, with no network, a symmetric
#: perturbation of S of size 3e-10 moved W by up to 7e-4 non-private and 6e-3 under DP on this
#: data: it stops at its own tolerances on a flat objective): 1e-2 there, with the same graph
#: required (the compared weights are ≥ 0.4 against the 0.3 threshold).
TOL = {
    "fed-sparse-standardize": 1e-2, "fed-bnsl": 1e-6, "fed-moments": 1e-2,
    "fed-sparse-dp": 1e-6, "fed-bnsl-dp-standardize": 1e-6, "fed-moments-dp": 1e-2,
}
#: masked replies per site: the summable kinds each run sends
SUMMED = {
    "fed-sparse-standardize": 3,  # two statistics shares, the polish moments (the sparse rounds are not summable)
    "fed-bnsl": 2 + 30,  # two statistics shares, one B_p per round
    "fed-moments": 2,  # the mean share, the moment share
    "fed-sparse-dp": 3,
    "fed-bnsl-dp-standardize": 2 + 20,
    "fed-moments-dp": 2,
}


@pytest.mark.parametrize("case", list(CASES))
def test_secure_run_equals_in_process(tables, case):
    plan = RunPlan.resolve(CASES[case], Shapes.of_tables(tables))
    rec = Recording(plan, tables)
    local = quiet(run, plan, rec)
    got, spy, errors = networked(plan, tables)
    assert not errors, errors
    assert not isinstance(got, Exception), got
    # the same graph; weights equal up to the fixed-point rounding of the sums (≤ P·2^-33 per entry)
    # carried through the solver (TOL: why each bound is honest)
    assert np.array_equal(got.W != 0, local.W != 0), case
    assert np.count_nonzero(local.W) >= 2, case  # a graph worth comparing
    np.testing.assert_allclose(got.W, local.W, atol=TOL[case], rtol=0)
    np.testing.assert_allclose(got.W_raw, local.W_raw, atol=TOL[case], rtol=0)
    print(case, "max |W_secure − W_in-process| =", float(np.max(np.abs(got.W - local.W))),
          "raw:", float(np.max(np.abs(got.W_raw - local.W_raw))), "edges:", np.count_nonzero(local.W))
    if plan.method != "fed-moments":  # (fed-moments' "rounds" are NOTEARS' outer steps: the solver path)
        assert got.report["rounds"] == local.report["rounds"]
    # the coordinator was only ever handed sums: every summable reply it held names all sites as
    # sender, carries the sum first and zeros for the other sites
    summed = 0
    for replies in spy.handed:
        heads = [r for r in replies if summable_span(r) is not None]
        if not heads:
            continue
        assert len(heads) == P
        summed += 1
        for k, r in enumerate(heads):
            assert HEADER.unpack_from(r, 0)[3] == ALL_SITES
            start = summable_span(r)[0]
            if k:
                assert not np.any(np.frombuffer(r, "<f8", offset=start))
    assert summed == SUMMED[case]
    # the first summed exchange (the column-mean shares, made from the rows alone) is the in-process
    # sum up to the fixed-point rounding: each term is rounded to 2^-32, i.e. ≤ P·2^-33 in all
    first = next(i for i, r in enumerate(spy.handed) if summable_span(r[0]) is not None)
    start = summable_span(spy.handed[first][0])[0]
    secure_sum = np.frombuffer(spy.handed[first][0], "<f8", offset=start)
    plain_sum = np.sum([np.frombuffer(r, "<f8", offset=start) for r in rec.handed[first]], axis=0)
    assert np.max(np.abs(secure_sum - plain_sum)) <= P * 2.0 ** -33 + 1e-15
    assert len(spy.masked) == P * SUMMED[case]
    # under DP: the same releases in every site's ledger as in-process (the encoding adds none)
    if plan.private:
        ev = lambda r: [[(e["release"], e["count"]) for e in p["events"]] for p in r.report["privacy"]["participants"]]  # noqa: E731
        assert ev(got) == ev(local)
        rho = lambda r: [e["rho"] for p in r.report["privacy"]["participants"] for e in p["events"]]  # noqa: E731
        # (a release's ρ is computed from its sensitivity, which can move in the last bits with the
        # pooled statistics that standardise the rows)
        np.testing.assert_allclose(rho(got), rho(local), rtol=1e-12)
        assert got.report["privacy"]["epsilon"] == pytest.approx(local.report["privacy"]["epsilon"], rel=1e-12)


@pytest.mark.parametrize("method", ["fed-moments", "fed-bnsl"])
def test_without_secure_sum_networked_equals_in_process_bit_for_bit(tables, method):
    """The same message bytes over the network (fed-moments ends with FINISH; the standardisation
    broadcast is answered with EMPTY and does not end a site's run)."""
    rounds = {"rounds": 30} if "--rounds" in method_spec(method).options else {}  # fed-moments takes none
    plan = RunPlan.resolve(LearnConfig(method=method, standardize=True, **rounds), Shapes.of_tables(tables))
    local = quiet(learn, tables, plan)
    got, spy, errors = networked(plan, tables, secure=False)
    assert not errors and not isinstance(got, Exception), (errors, got)
    assert np.count_nonzero(local.W) >= 2
    assert np.array_equal(got.W_raw, local.W_raw) and np.array_equal(got.W, local.W)
    assert not spy.masked


def test_masked_replies_are_not_the_values(tables):
    """What arrives from a site is its masked vector, far from its share; the sum is right."""
    plan = RunPlan.resolve(LearnConfig(method="fed-moments"), Shapes.of_tables(tables))
    got, spy, errors = networked(plan, tables)
    assert not errors
    from bnsl_cli.federated.messages import MomentRequest, ShareReply

    site0 = make_participant(plan, 0, tables[0].X, None)
    true0 = ShareReply.decode(site0.handle(MomentRequest(0, D).encode())).values
    idx, body = spy.masked[0]
    assert idx == 0
    y = np.frombuffer(body, "<u8", offset=HEADER.size)
    from bnsl_cli.federated.secure_sum import decode_sum

    assert np.max(np.abs(decode_sum(y, 32) - true0)) > 1e3  # uniform mod 2^64: nothing like the value
    mean = np.frombuffer(spy.handed[0][0], "<f8", offset=HEADER.size)
    np.testing.assert_allclose(mean, np.vstack([t.X for t in tables]).mean(axis=0), atol=1e-9)


def test_value_out_of_range_is_refused_at_the_site(tables):
    """A column in large raw units overflows the fixed point: the site sends nothing but an ABORT
    that says what and what to do; the coordinator stops naming the site."""
    big = [Table(t.X * np.array([1.0] * (D - 1) + [1e5]), t.names, t.path) for t in tables]  # variance ≈ 1e10
    plan = RunPlan.resolve(LearnConfig(method="fed-moments", standardize=True), Shapes.of_tables(big))
    got, spy, errors = networked(plan, big)
    assert isinstance(got, FederationError)
    assert "site" in str(got) and "aborted the run" in str(got) and "fixed-point range" in str(got)
    assert "--secure-sum-bits" in str(got) and "\n" not in str(got)
    assert any(isinstance(e, SecureSumRangeError) and e.exit_code == 3 for e in errors.values())  # bad input data
    assert len(spy.handed) == 1  # the mean shares fit (|share| ≈ 1e4); the moment shares never left the sites
    assert "pooled statistics (message kind 25, round 1)" in str(got)
    # a smaller scale takes it (range 2^(63-16)/3 ≈ 4.7e13)
    got, _, errors = networked(plan, big, bits=16)
    assert not errors and not isinstance(got, Exception)


# -- one run with real processes and mutual TLS ------------------------------------------------


@pytest.mark.slow  # a heavy end-to-end networked run
def test_cli_fed_bnsl_dp_secure_sum(small_world, tmp_path):
    """bnsl serve --secure-sum and three bnsl join processes (mutual TLS) against the same plan run in
    process on the same CSVs."""
    from bnsl_cli.io.csv_reader import read_table

    certs, paths = small_world
    opts = ["--method", "fed-bnsl", "--dp", "--epsilon", "20", "--value-bound", "20", "--rounds", "20", "--seed", "2"]
    out = tmp_path / "served"
    coord, port = serve(certs, out, *opts, "--secure-sum")
    # 300 rows per site: the plan's default δ = 1/300² is above join's default bound (1e-5)
    sites = [join(certs, port, p, f"site{k + 1}", "--max-epsilon", "20", "--max-delta", "1e-4", "--accept-seeded-noise",
                   "--transcript", str(tmp_path / f"t{k + 1}.jsonl")) for k, p in enumerate(paths)]
    cfg = LearnConfig(method="fed-bnsl", dp=DPConfig(epsilon=20, value_bound=20.0), rounds=20, seed=2, workers=1)
    tabs = [read_table(p) for p in paths]
    local = quiet(learn, tabs, RunPlan.resolve(cfg, Shapes.of_tables(tabs)))
    all_ok(coord, sites)
    a = json.loads((out / "report.json").read_text())
    assert a["network"]["secure_sum"] is True and a["network"]["secure_sum_bits"] == 32
    W = np.zeros((D, D))
    names = list(a["graph"]["nodes"])
    for e in a["graph"]["edges"]:
        W[names.index(e["source"]), names.index(e["target"])] = e["weight"]
    assert np.count_nonzero(local.W) >= 2  # (4 edges on this data)
    assert np.array_equal(W != 0, local.W != 0)
    np.testing.assert_allclose(W, local.W, atol=1e-6)
    for k in range(P):
        recs = [json.loads(line) for line in (tmp_path / f"t{k + 1}.jsonl").read_text().splitlines()]
        sent = [r["frame"] for r in recs if r["event"] == "sent"]
        assert sent.count("MASKED") == 2 + a["rounds"] and sent.count("DATA") == 0  # nothing summable in the clear
        rho = sum(r["rho"] for r in recs if r["event"] == "release")
        assert rho == pytest.approx(a["privacy"]["participants"][k]["rho"], rel=1e-9)
        assert rho == pytest.approx(local.report["privacy"]["participants"][k]["rho"], rel=1e-12)
