"""The coordinator sees messages only: it cannot import participant code or data readers."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np

import pytest

import bnsl_cli.federated.methods.admm.coordinator as coordinator_module
import bnsl_cli.federated.methods.admm as admm_module
import bnsl_cli.federated.polish as polish_module
import bnsl_cli.federated.methods.admm.protocol as protocol_module
from bnsl_cli.federated.methods.admm.coordinator import Coordinator
from bnsl_cli.federated.methods.admm.site import SparseParticipant
from bnsl_cli.federated.methods.admm.protocol import run_admm


import bnsl_cli.federated.methods.admm.driver as admm_driver_module
import bnsl_cli.federated.methods.moments.driver as moments_driver_module
import bnsl_cli.federated.methods.suffstats.driver as suffstats_driver_module


@pytest.mark.parametrize(
    "module",
    [coordinator_module, polish_module, protocol_module, admm_driver_module, moments_driver_module,
     suffstats_driver_module],
    ids=["coordinator", "polish", "protocol", "admm driver", "moments driver", "suffstats driver"],
)
def test_coordinator_module_imports_no_participant_or_data_code(module):
    _assert_imports_no_participant_or_data_code(module)
    code = (
        f"import sys, {module.__name__}\n"
        "site = lambda m: m.startswith('bnsl_cli.') and (m.rsplit('.', 1)[-1] == 'site' or m.endswith('_site') or 'participant' in m)\n"
        "bad = [m for m in sys.modules if site(m) or m.startswith('bnsl_cli.io') or m == 'pandas']\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _assert_imports_no_participant_or_data_code(module):
    tree = ast.parse(Path(module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    # a site role's module (methods/*/site.py, dp_site.py, share_site.py; "participant" in older names)
    def site(m):
        return m.rsplit(".", 1)[-1] == "site" or m.endswith("_site") or "participant" in m

    forbidden = {m for m in imported if m and (site(m) or m.startswith("bnsl_cli.io") or "pandas" in m)}
    assert not forbidden, forbidden


def test_admm_driver_imports_no_participant_or_data_code():
    """The ADMM driver lives in the methods package, whose registry binds the participant factories
    too: its own imports hold no participant or data code (the registry's do, by design)."""
    _assert_imports_no_participant_or_data_code(admm_module)


def test_coordinator_receives_only_bytes_and_holds_no_rows():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    parts = [SparseParticipant(k, X[k * 100 : (k + 1) * 100], 300, 0.01, 10) for k in range(3)]
    coord = Coordinator(5, 3)
    seen = []

    def transport(p):
        def send(msg):
            assert isinstance(msg, bytes)
            reply = p.handle(msg)
            seen.append(type(reply))
            return reply

        return send

    stage = polish_module.PolishStage(0.3, 300)
    run_admm(coord, [transport(p) for p in parts], 5, polish=stage)
    assert set(seen) <= {bytes, type(None)}
    assert stage.result is not None  # the polish exchange went through the same byte transport
    for obj in (coord, stage):
        for value in vars(obj).values():
            if isinstance(value, np.ndarray):
                assert 100 not in value.shape and 300 not in value.shape
