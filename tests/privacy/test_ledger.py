"""The privacy ledger: per-event zCDP costs, merging, per-participant composition, JSON form."""

import json
import math

import pytest

from bnsl_cli.privacy.accountant import epsilon_from_rho
from bnsl_cli.privacy.ledger import (
    EXPONENTIAL,
    GAUSSIAN,
    NEIGHBOURING_RELATION,
    PrivacyEvent,
    PrivacyLedger,
)

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting import dp_event  # noqa: E402
from dp_accounting.rdp import rdp_privacy_accountant as rdp  # noqa: E402


def test_gaussian_cost():
    ev = PrivacyEvent("column-means", GAUSSIAN, sensitivity=0.3, noise_scale=1.5, count=1)
    assert ev.rho_each == pytest.approx(0.3**2 / (2 * 1.5**2), rel=1e-15)
    assert ev.noise_multiplier == pytest.approx(5.0)


def test_exponential_cost_is_eps_squared_over_eight():
    # Gumbel scale b = 2 Delta_S / eps_s  ->  rho = eps_s**2 / 8
    for eps_s, delta_s in [(0.1, 1.0), (1.0, 0.02), (3.0, 7.0)]:
        ev = PrivacyEvent("coordinate-selection", EXPONENTIAL, delta_s, 2 * delta_s / eps_s)
        assert ev.rho_each == pytest.approx(eps_s**2 / 8, rel=1e-12)


def test_count_multiplies_and_scale_invariance():
    a = PrivacyEvent("coordinate-update", GAUSSIAN, 1.0, 4.0, count=250)
    b = PrivacyEvent("coordinate-update", GAUSSIAN, 0.01, 0.04, count=250)
    assert a.rho == pytest.approx(250 * a.rho_each)
    assert a.rho == pytest.approx(b.rho, rel=1e-12)  # only noise / sensitivity matters


def test_degenerate_noise():
    assert PrivacyEvent("covariance", GAUSSIAN, 1.0, 0.0).rho == math.inf
    assert PrivacyEvent("covariance", GAUSSIAN, 0.0, 0.0).rho == 0.0
    assert PrivacyEvent("covariance", GAUSSIAN, 1.0, math.inf).rho == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(mechanism="laplace"),
        dict(sensitivity=-1.0),
        dict(noise_scale=-0.1),
        dict(noise_scale=float("nan")),
        dict(count=0),
        dict(count=1.5),
    ],
)
def test_invalid_events(kwargs):
    base = dict(release="x", mechanism=GAUSSIAN, sensitivity=1.0, noise_scale=1.0, count=1)
    base.update(kwargs)
    with pytest.raises(ValueError):
        PrivacyEvent(**base)


def test_event_is_frozen():
    ev = PrivacyEvent("covariance", GAUSSIAN, 1.0, 1.0)
    with pytest.raises(Exception):
        ev.count = 3  # type: ignore[misc]


def test_merging_keeps_the_ledger_small():
    ledger = PrivacyLedger()
    sel = PrivacyEvent("coordinate-selection", EXPONENTIAL, 1.0, 30.0)
    upd = PrivacyEvent("coordinate-update", GAUSSIAN, 1.0, 30.0)
    for _round in range(50):
        for _step in range(200):
            ledger.record(3, sel)
            ledger.record(3, upd)
    assert len(ledger) == 2
    counts = {ev.release: ev.count for ev in ledger.events(3)}
    assert counts == {"coordinate-selection": 10_000, "coordinate-update": 10_000}
    assert ledger.rho(3) == pytest.approx(20_000 * 0.5 / 30.0**2, rel=1e-12)


def test_distinct_events_stay_separate():
    ledger = PrivacyLedger()
    ledger.record(0, PrivacyEvent("coordinate-update", GAUSSIAN, 1.0, 2.0))
    ledger.record(0, PrivacyEvent("coordinate-update", GAUSSIAN, 1.0, 3.0))  # other noise
    ledger.record(0, PrivacyEvent("column-means", GAUSSIAN, 1.0, 2.0))  # other release
    ledger.record(0, PrivacyEvent("coordinate-update", EXPONENTIAL, 1.0, 2.0))  # other mechanism
    assert len(ledger) == 4
    expected = 0.5 / 4 + 0.5 / 9 + 0.5 / 4 + 0.5 / 4
    assert ledger.rho(0) == pytest.approx(expected, rel=1e-14)


def test_participants_compose_in_parallel():
    ledger = PrivacyLedger()
    ledger.record(0, PrivacyEvent("covariance", GAUSSIAN, 1.0, 1.0))  # rho 0.5
    ledger.record(1, PrivacyEvent("covariance", GAUSSIAN, 1.0, 0.5))  # rho 2
    ledger.record(1, PrivacyEvent("column-means", GAUSSIAN, 1.0, 1.0))  # +0.5
    ledger.add_participant(7)
    assert ledger.participants == [0, 1, 7]
    assert ledger.rho(0) == pytest.approx(0.5)
    assert ledger.rho(1) == pytest.approx(2.5)
    assert ledger.rho(7) == 0.0
    assert ledger.rho(99) == 0.0
    assert ledger.max_rho() == pytest.approx(2.5)  # the largest participant, not the sum
    assert ledger.epsilon(1e-6) == pytest.approx(epsilon_from_rho(2.5, 1e-6))
    assert ledger.epsilon(1e-6, participant=0) == pytest.approx(epsilon_from_rho(0.5, 1e-6))


def test_empty_ledger():
    ledger = PrivacyLedger()
    assert ledger.max_rho() == 0.0
    d = ledger.to_dict(1e-5)
    assert d["epsilon"] == 0.0 and d["rho"] == 0.0 and d["participants"] == []


def test_to_dict_is_json_ready_and_consistent():
    ledger = PrivacyLedger()
    for p in (0, 1):
        ledger.record(p, PrivacyEvent("second-moments", GAUSSIAN, 2.0, 20.0))
        ledger.record(p, PrivacyEvent("coordinate-selection", EXPONENTIAL, 0.1, 5.0, count=100))
    ledger.record(1, PrivacyEvent("coordinate-update", GAUSSIAN, 0.1, 5.0, count=100))
    d = ledger.to_dict(1e-8, "tight")
    json.dumps(d, allow_nan=False)
    assert d["delta"] == 1e-8
    assert d["neighbouring_relation"] == NEIGHBOURING_RELATION == "replace-one row of one participant"
    assert d["conversion"] == "tight"
    assert d["rho"] == pytest.approx(ledger.rho(1))
    assert d["epsilon"] == pytest.approx(epsilon_from_rho(ledger.rho(1), 1e-8))
    parts = {p["participant"]: p for p in d["participants"]}
    assert set(parts) == {0, 1}
    for pid, part in parts.items():
        assert part["rho"] == pytest.approx(sum(e["rho"] for e in part["events"]))
        assert part["epsilon"] == pytest.approx(epsilon_from_rho(part["rho"], 1e-8))
        for e in part["events"]:
            assert e["rho"] == pytest.approx(e["count"] * e["rho_each"])
    assert d["epsilon"] == max(p["epsilon"] for p in d["participants"])
    simple = ledger.to_dict(1e-8, "simple")
    assert simple["conversion"] == "simple" and simple["epsilon"] > d["epsilon"]


def test_to_dict_without_noise_stays_valid_json():
    ledger = PrivacyLedger()
    ledger.record(0, PrivacyEvent("covariance", GAUSSIAN, 1.0, 0.0))
    d = ledger.to_dict(1e-5)
    json.dumps(d, allow_nan=False)
    assert d["epsilon"] is None and d["rho"] is None


def test_ledger_agrees_with_dp_accounting_composition():
    """The ledger's composed rho, converted, is never looser than dp_accounting and close to it.

    Gaussian events are given to dp_accounting as GaussianDpEvent (its own RDP formula); the Gumbel-max
    selections as ZCDpEvent with rho = Delta_S**2 / (2 b**2). See test_accountant for the relation.
    """
    events = [
        PrivacyEvent("second-moments", GAUSSIAN, 0.4, 8.0),
        PrivacyEvent("column-means", GAUSSIAN, 0.2, 4.0),
        PrivacyEvent("coordinate-selection", EXPONENTIAL, 0.01, 2.5, count=1000),
        PrivacyEvent("coordinate-update", GAUSSIAN, 0.03, 7.5, count=1000),
    ]
    ledger = PrivacyLedger()
    acc = rdp.RdpAccountant(neighboring_relation=rdp.NeighborRel.REPLACE_ONE)
    for ev in events:
        ledger.record(0, ev)
        if ev.mechanism == GAUSSIAN:
            inner = dp_event.GaussianDpEvent(ev.noise_scale / ev.sensitivity)
        else:
            inner = dp_event.ZCDpEvent(ev.rho_each)
        acc.compose(dp_event.SelfComposedDpEvent(inner, ev.count))
    delta = 1e-8
    ours = ledger.epsilon(delta)
    theirs = acc.get_epsilon(delta)
    assert ours <= theirs + 1e-12
    assert theirs <= 1.03 * ours


def test_release_names_live_in_one_enumeration():
    """Issue 12.3: every release name is a ReleaseKind; no module spells one as a string literal."""
    import ast
    from pathlib import Path

    import bnsl_cli
    from bnsl_cli.privacy.releases import ReleaseKind

    names = {k.value for k in ReleaseKind}
    root = Path(bnsl_cli.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.name == "releases.py" and path.parent.name == "privacy":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.value!r}")
    assert not found, found
    with pytest.raises(ValueError, match="unknown release"):
        PrivacyEvent("made-up", GAUSSIAN, 1.0, 1.0)
