"""A malicious site against the coordinator's reply validation (issue 20 item 3): over the network
a bad reply stops the run with exit code 6 naming that site, and no output is written."""

from __future__ import annotations

import math
import threading

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.federated.messages import MessageKind  # noqa: E402
from bnsl_cli.federated.methods.registry import make_participant  # noqa: E402
from bnsl_cli.plan.options import LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from tests.federated.test_reply_validation import Corrupt, _out_of_range, _set_values, _wrong_shape  # noqa: E402
from tests.net.conftest import error_lines, join, networked, no_outputs, serve  # noqa: E402

CASES = [
    ("fed-sparse", MessageKind.BROADCAST, lambda r: _set_values(r, math.nan), "non-finite"),
    ("fed-sparse", MessageKind.BROADCAST, lambda r: _set_values(r, 1e308), "magnitude 1e+308"),
    ("fed-sparse", MessageKind.BROADCAST, _out_of_range, "outside the d × d matrix"),
    ("fed-bnsl", MessageKind.BROADCAST, _wrong_shape, "malformed"),
    ("fed-sparse", MessageKind.STATS_REQUEST, lambda r: _set_values(r, math.inf), "non-finite value (inf) in its share"),
    # issue 28: within the blanket range, beyond what the site's rows can give (before: site 1 was blamed
    # for the overflowed second moments about the poisoned mean)
    ("fed-sparse", MessageKind.STATS_REQUEST, lambda r: _set_values(r, 1e99),
     "value of magnitude 1e+99 in its share of the column means"),
]


@pytest.mark.parametrize("method, kind, bad, says", CASES, ids=[f"{c[0]}-{c[3][:16]}" for c in CASES])
def test_a_bad_reply_over_the_network_names_the_site(tables, method, kind, bad, says):
    plan = RunPlan.resolve(LearnConfig(method=method, rounds=5), Shapes.of_tables(tables))

    def part_for(plan, k, X, rng):
        p = make_participant(plan, k, X, rng)
        return Corrupt(p, kind, bad, nth=2 if kind == MessageKind.BROADCAST else 1) if k == 1 else p

    got, _, errors = networked(plan, tables, secure=False, part_for=part_for)
    assert isinstance(got, Exception) and got.exit_code == 6, got
    assert str(got).startswith("site 2 (site1) ") and says in str(got), str(got)


def test_a_masked_share_beyond_the_sites_limits_stops_the_run_naming_no_site(tables):
    """Under a secure sum the coordinator sees the sum of the masked shares only (issue 28): a sum beyond
    the sum of the sites' limits stops the run (exit 6), and the message says no site can be named."""
    from bnsl_cli.plan.options import DPConfig

    plan = RunPlan.resolve(LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=5.0, noise="distributed"), seed=1),
                           Shapes.of_tables(tables))

    def part_for(plan, k, X, rng):
        p = make_participant(plan, k, X, rng)
        return Corrupt(p, MessageKind.FIRST_REQUEST, lambda r: _set_values(r, 1e5)) if k == 1 else p

    got, _, _ = networked(plan, tables, secure=True, part_for=part_for)
    assert isinstance(got, Exception) and got.exit_code == 6, got
    assert str(got).startswith("the sites' securely summed scale histograms holds a value of magnitude 1e+05"), str(got)
    assert "a secure sum cannot tell which site sent it" in str(got)


@pytest.mark.slow  # a heavy end-to-end networked run
def test_serve_stops_with_exit_6_naming_the_site_of_a_nan_mean_share(small_world, tmp_path):
    """``bnsl serve`` with one honest ``bnsl join`` and one site (in this process) whose mean share is
    NaN: the coordinator exits 6 naming that site, writes nothing; the honest site exits 6 too."""
    from bnsl_cli.net.site import run_site
    from bnsl_cli.net.tls import load_party
    from bnsl_cli.federated.secure_sum import generate_keypair
    from bnsl_cli.io.csv_reader import read_table

    certs, csvs = small_world
    out = tmp_path / "out"
    coord, port = serve(certs, out, "--rounds", "5", "--seed", "1", participants=2)
    honest = join(certs, port, csvs[0], "site1", "--allow-non-private")
    table = read_table(csvs[1])
    sk, pk = generate_keypair()
    creds = load_party(certs / "ca.pem", certs / "site2.pem", certs / "site2.key")
    hello = {"site": "site2", "columns": list(table.names), "rows": table.n, "x25519": pk.hex()}

    def on_plan(body):
        plan = RunPlan.from_dict(body["plan"])
        return Corrupt(make_participant(plan, body["index"], table.X, None), MessageKind.STATS_REQUEST,
                       lambda r: _set_values(r, math.nan))

    errors = []

    def site():
        try:
            run_site(f"127.0.0.1:{port}", hello, on_plan, secure_key=sk, credentials=creds, timeout=30, connect_timeout=10)
        except Exception as exc:  # noqa: BLE001 - inspected below
            errors.append(exc)

    th = threading.Thread(target=site)
    th.start()
    code, _, err = coord.done(90)
    th.join(30)
    assert code == 6, err
    lines = error_lines(err)
    assert len(lines) == 1 and "site 2 (site2) sent a non-finite value (nan) in its share" in lines[0], err
    assert no_outputs(out)
    hcode, _, herr = honest.done(60)
    assert hcode == 6 and "site 2 (site2)" in herr, herr
    assert errors and errors[0].exit_code == 6
