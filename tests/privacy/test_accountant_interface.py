"""The accountant interface (bnsl_cli/privacy/accountant.py): one object per accountant, looked up by
name once; nothing else compares an accountant's name."""

import ast
import math
from pathlib import Path

import pytest

from bnsl_cli.errors import OptionError, PrivacyBudgetError
from bnsl_cli.privacy import release_plan
from bnsl_cli.privacy.accountant import (
    ACCOUNTANT_DESCRIPTIONS,
    ACCOUNTANTS,
    Accountant,
    PLDAccountant,
    ZCDPAccountant,
    accountant_epsilon,
    accountant_option,
    epsilon_from_rho,
    get_accountant,
    rho_for_epsilon,
)
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.releases import EXPONENTIAL, GAUSSIAN

PACKAGE = Path(__file__).resolve().parents[2] / "bnsl_cli"


def _events():
    return [PrivacyEvent("covariance", GAUSSIAN, 1.0, 3.0, 1),
            PrivacyEvent("coordinate-selection", EXPONENTIAL, 1.0, 40.0, 200)]


def test_lookup_by_name_once():
    assert ACCOUNTANTS == ("pld", "zcdp")  # the first is --accountant's default
    pld, zcdp = (get_accountant(n) for n in ACCOUNTANTS)
    assert isinstance(pld, PLDAccountant) and isinstance(zcdp, ZCDPAccountant)
    assert get_accountant("pld") is pld and get_accountant(pld) is pld
    assert ACCOUNTANT_DESCRIPTIONS == {"pld": pld.description, "zcdp": zcdp.description}
    with pytest.raises(ValueError, match="unknown accountant 'rdp'; use one of: pld, zcdp"):
        get_accountant("rdp")
    with pytest.raises(OptionError) as err:
        accountant_option("PLD")
    assert str(err.value) == "--accountant: unknown accountant 'PLD'; use pld or zcdp"


def test_labels_say_whether_the_conversion_counts():
    pld, zcdp = get_accountant("pld"), get_accountant("zcdp")
    assert pld.spend_note("simple") == "pld accountant" and pld.label("simple") == "privacy-loss distributions"
    assert zcdp.spend_note("simple") == "zcdp accountant, simple conversion"
    assert zcdp.label("tight") == "zCDP, tight conversion"


@pytest.mark.parametrize("conversion", ["tight", "simple"])
def test_one_participant_and_a_run(conversion):
    events = _events()
    rho = math.fsum(ev.rho for ev in events)
    zcdp, pld = get_accountant("zcdp"), get_accountant("pld")
    assert zcdp.epsilon(events, 1e-6, conversion) == epsilon_from_rho(rho, 1e-6, conversion)
    assert pld.epsilon(events, 1e-6, conversion) <= epsilon_from_rho(rho, 1e-6, "tight")
    assert accountant_epsilon(events, 1e-6, "pld") == pld.epsilon(events, 1e-6)
    # a run: the largest participant (zCDP: the largest ρ converted; PLD: the largest ε)
    small = events[:1]
    for acc in (zcdp, pld):
        assert acc.run_epsilon([small, events], 1e-6, conversion) == acc.epsilon(events, 1e-6, conversion)
        assert acc.run_epsilon([], 1e-6, conversion) == 0.0
    ledger = PrivacyLedger()
    ledger.record(0, events[0])
    ledger.record(0, events[1])
    ledger.record(1, events[0])
    for acc in (zcdp, pld):
        doc = ledger.to_dict(1e-6, conversion, acc)
        assert doc["accountant"] == acc.name and doc["composition"] == acc.composition
        assert doc["epsilon"] == ledger.epsilon(1e-6, conversion, accountant=acc.name)


def test_the_inverse_the_calibration_needs():
    def build(rho):
        return release_plan.dp_fed_bnsl_releases(rho, mean_share=0.05, moment_share=0.05, value_bound_given=False)

    zcdp, pld = get_accountant("zcdp"), get_accountant("pld")
    assert zcdp.scale_for_epsilon(None, 2.0, 1e-6, "simple") == rho_for_epsilon(2.0, 1e-6, "simple")
    for acc in (zcdp, pld):
        releases, rho = release_plan.calibrate_releases(build, 2.0, 1e-6, "tight", acc)
        assert release_plan.spend_of(releases, 1e-6, "tight", acc)[0] <= 2.0
    # the PLD buys noise on Gaussian releases: a larger scale for the same ε
    assert release_plan.calibrate_releases(build, 2.0, 1e-6, "tight", pld)[1] > rho_for_epsilon(2.0, 1e-6)


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
@pytest.mark.parametrize("epsilon", [0.0, -1.0, float("nan"), float("inf")])
def test_a_direct_caller_s_invalid_epsilon_is_refused_by_the_inverse(accountant, epsilon):
    """calibrate_releases no longer re-checks ε (resolve_privacy checked it with the options); a
    library caller that skips that check is still refused, by the accountant's inverse."""
    with pytest.raises(PrivacyBudgetError, match="epsilon must be a finite number > 0"):
        release_plan.calibrate_releases(lambda r: [], epsilon, 1e-6, "tight", accountant)


def test_no_module_compares_an_accountant_name():
    """The accountant is chosen by :func:`get_accountant`, never by comparing its name."""
    names = {get_accountant(n).name for n in ACCOUNTANTS}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                for operand in [node.left, *node.comparators]:
                    if isinstance(operand, ast.Constant) and operand.value in names:
                        offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
                    if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) and any(
                            isinstance(e, ast.Constant) and e.value in names for e in operand.elts):
                        offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not offenders, offenders


def test_an_accountant_is_one_object_with_the_whole_interface():
    for name in ACCOUNTANTS:
        acc = get_accountant(name)
        assert isinstance(acc, Accountant) and acc.name == name
        for method in ("label", "epsilon", "largest", "scale_for_epsilon"):
            assert getattr(type(acc), method) is not getattr(Accountant, method), (name, method)
