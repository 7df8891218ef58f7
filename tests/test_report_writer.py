"""One report writer: ``bnsl_cli/report.py`` is the only module that assigns ``report.json``'s keys
(the others hand it typed entries), and the report's keys keep their order for every method."""

from __future__ import annotations

import ast
import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

from bnsl_cli.federated import outcome as outcome_module
from bnsl_cli.io.table import ReadOptions, Table
from bnsl_cli.knowledge import KnowledgeSource
from bnsl_cli.learn import learn
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.report import InputRecord, NetworkRecord, SiteRecord, network_report

PACKAGE = Path(__file__).resolve().parents[1] / "bnsl_cli"
WRITER = PACKAGE / "report.py"
#: methods that change a dict in place
MUTATORS = frozenset({"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"})


def report_writes(source: str) -> list[str]:
    """The statements of ``source`` that write into a report: an item assigned, deleted or
    augmented on an expression that names a report (``report[...] = …``, ``result.report[...] = …``,
    ``report["timing"]["wall_s"] = …``), or a dict-mutating method called on one
    (``report.setdefault(…)``, ``result.report.update(…)``)."""
    found = []

    def names_report(node) -> bool:
        return "report" in ast.unparse(node).lower()

    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Subscript) and names_report(sub.value):
                    found.append(ast.unparse(node).splitlines()[0])
                    break
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                and names_report(node.func.value)):
            found.append(ast.unparse(node).splitlines()[0])
    return found


def test_no_module_but_report_py_assigns_report_keys():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == WRITER:
            continue
        writes = report_writes(path.read_text(encoding="utf-8"))
        if writes:
            offenders[str(path.relative_to(PACKAGE.parent))] = writes
    assert not offenders, offenders


@pytest.mark.parametrize("code", [
    "result.report['input'] = {}",
    "report['timing']['wall_s'] = 1.0",
    "report['warnings'] += ['x']",
    "std = report.setdefault('standardize', {})",
    "result.report.update(network={})",
    "report['local'][0].pop('W')",
    "del report['graph']",
])
def test_the_scan_catches_every_form(code):
    assert len(report_writes(code)) == 1


def test_the_scan_lets_a_report_be_read():
    assert report_writes("x = result.report['method']\nrep = report.get('history') or []\nsummary = report()") == []


def test_every_outcome_entry_is_a_frozen_dataclass():
    """What a driver hands back holds typed entries, not dicts: every entry class of the outcome
    module is a frozen dataclass (the outcomes themselves stay mutable: the run maps their graphs
    back to original units)."""
    entries = [getattr(outcome_module, n) for n in outcome_module.__all__ if not n.endswith("Outcome")]
    assert entries
    for cls in entries:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls


# -- the report's keys, in order ----------------------------------------------------------------------------


def _tables(P: int = 3, n: int = 150, seed: int = 4) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(P):
        X = rng.normal(size=(n, 4))
        X[:, 1] += 0.9 * X[:, 0]
        X[:, 2] += 0.8 * X[:, 1]
        X[:, 3] -= 0.7 * X[:, 1]
        out.append(Table(X, ("a", "b", "c", "d"), Path(f"site{k}.csv")))
    return out


HEAD = ["schema_version", "orientation", "method", "method_label", "options", "seed", "versions", "data"]
ADMM = ["rounds", "stopped_early", "converged", "final", "history", "communication", "timing",
        "removed_for_acyclicity", "warnings", "polish", "solver_issues"]
SOLVER = ["rounds", "converged", "final", "history", "communication", "timing", "removed_for_acyclicity",
          "solver_issues", "warnings"]
TAIL = ["graph", "privacy"]

KEYS = {
    "fed-sparse": HEAD + ["standardize"] + ADMM + TAIL,
    "fed-sparse-dp-knowledge": HEAD + ["standardize"] + ADMM + ["knowledge"] + TAIL,
    "fed-bnsl": HEAD + ["standardize"] + ADMM + TAIL,
    "fed-moments": HEAD + SOLVER + ["standardize"] + TAIL,
    "fed-suffstats-dp": HEAD + SOLVER + ["suffstats", "standardize"] + TAIL,
    "notears": HEAD + SOLVER + TAIL,
    "notears-standardize": HEAD + SOLVER + ["standardize"] + TAIL,
    "local-notears-standardize": HEAD + ["rounds", "converged", "local", "communication", "timing", "warnings",
                                         "standardize"] + TAIL,
}
CONFIGS = {
    "fed-sparse": LearnConfig(method="fed-sparse", rounds=6),
    "fed-sparse-dp-knowledge": LearnConfig(method="fed-sparse", rounds=4, seed=1, dp=DPConfig(epsilon=5.0, value_bound=8.0),
                                           knowledge=KnowledgeSource.from_options(["a->b"], ["c->a"])),
    "fed-bnsl": LearnConfig(method="fed-bnsl", rounds=4),
    "fed-moments": LearnConfig(method="fed-moments"),
    "fed-suffstats-dp": LearnConfig(method="fed-suffstats", seed=1, dp=DPConfig(epsilon=5.0)),
    "notears": LearnConfig(method="notears"),
    "notears-standardize": LearnConfig(method="notears", standardize=True),
    "local-notears-standardize": LearnConfig(method="local-notears", standardize=True),
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_the_report_keys_keep_their_order(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = learn(_tables(), CONFIGS[name]).report
    assert list(rep) == KEYS[name]
    assert list(rep["timing"])[-2:] == ["workers", "wall_s"]
    if "history" in rep and name.startswith("fed-sparse"):
        rnd = rep["history"][0]
        assert list(rnd) == ["round", "h", "gap", "objective", "rho1", "rho2", "alpha", "edges",
                             "bytes_up", "bytes_down", "local_s", "round_s"]  # no support without --trace
    if name == "fed-sparse":
        assert list(rep["polish"])[:2] == ["applied", "edges_before"] and list(rep["polish"])[-2:] == ["pairs", "seconds"]
    if name == "local-notears-standardize":
        assert list(rep["local"][0]) == ["participant", "outer_steps", "h", "converged", "removed_for_acyclicity", "graph"]
        assert list(rep["standardize"]) == ["applied", "weights", "sd"] and len(rep["standardize"]["sd"]) == 3


def test_the_input_record_comes_last():
    read = ReadOptions(drop=("d",))
    rep = learn(_tables(), LearnConfig(method="notears"), input_record=InputRecord(read, (0, 2, 1))).report
    assert list(rep)[-1] == "input"
    assert rep["input"] == {**read.to_dict(), "dropped_rows": [0, 2, 1]}


def test_the_network_record_as_the_report_writes_it():
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes

    plan = RunPlan.resolve(LearnConfig(method="fed-sparse"), Shapes.of_tables(_tables()))
    site = SiteRecord(1, "site1", "ipv4:127.0.0.1:5", 150, None, None)
    net = network_report(plan, NetworkRecord("127.0.0.1:7443", False, None, None, None, (site,)))
    assert list(net) == ["listen", "transport", "secure_sum", "secure_sum_bits", "peer_identity",
                         "coordinator_certificate_sha256", "allow_sites", "sites", "participant_timing"]
    assert net["transport"] == "gRPC, plaintext on loopback (--insecure)" and net["secure_sum"] is False
    assert net["sites"] == [{"participant": 1, "site": "site1", "peer": "ipv4:127.0.0.1:5", "rows": 150,
                             "identity": None, "certificate_sha256": None}]
    assert net["participant_timing"] == "compute times reported by the sites"
