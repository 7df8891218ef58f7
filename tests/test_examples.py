"""Every example script runs in --quick mode and writes a table with the expected columns and rows."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# script -> (main CSV, columns that must be there, expected number of rows in --quick mode)
EXPECTED = {
    "convergence": ("convergence.csv", ["method", "round", "shd_mean", "shd_std", "tpr_mean", "tpr_std", "fdr_mean", "fdr_std", "n_seeds"], 2 * 30),
    "privacy_sweep": ("privacy_sweep.csv", ["method", "epsilon", "delta", "shd_mean", "shd_std", "tpr_mean", "fdr_mean", "runs_with_public_bound"], 3 + 1),
    "dimension_sweep": ("dimension_sweep.csv", ["method", "d", "shd_mean", "shd_std", "tpr_mean", "fdr_mean", "epsilon"], 2 * 2),
    "personalisation": ("personalisation.csv", ["approach", "median_mse", "mean_mse", "q25_mse", "q75_mse", "n"], 5),
    "communication": ("communication.csv", ["method", "d", "mb_up_mean", "mb_down_mean", "mb_total_mean", "mb_total_std", "rounds_mean"], 2 * 2),
    "sachs": ("sachs.csv", ["method", "shd_mean", "tpr_mean", "fdr_mean", "nnz_mean", "skeleton_correct_mean", "shd_cdt_mean", "paper_shd", "paper_skeleton_correct"], 5),
}


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def run_example(name: str, out: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--quick", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=240,
    )


def _in_unit(series) -> bool:
    return all(v is None or (isinstance(v, float) and math.isnan(v)) or 0.0 <= v <= 1.0 for v in series)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_quick_mode_writes_its_table(tmp_path, name):
    csv_name, columns, n_rows = EXPECTED[name]
    proc = run_example(name, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_csv(tmp_path / csv_name)
    assert set(columns) <= set(df.columns), sorted(set(columns) - set(df.columns))
    assert len(df) == n_rows
    for col in df.columns:
        if col.startswith(("tpr_", "fdr_")) and col.endswith("_mean"):
            assert _in_unit(df[col]), col
        if col.startswith("shd_") and col.endswith("_mean"):
            assert (df[col] >= 0).all()
    if name == "personalisation":
        assert (df["median_mse"] >= 0).all() and set(df["approach"]) >= {"consensus", "fed-sparse+refit", "local-notears"}
        # the oracle refit (true DAG, own rows) must beat the one-size-fits-all consensus weights
        med = df.set_index("approach")["median_mse"]
        assert med["oracle-refit"] < med["consensus"]
    if name == "communication":
        assert (df["mb_total_mean"] > 0).all()
        assert ((df["mb_up_mean"] + df["mb_down_mean"] - df["mb_total_mean"]).abs() < 1e-6).all()
    if name == "sachs":
        assert set(df["method"]) == {"fed-sparse", "fed-bnsl", "notears", "dp-fed-sparse", "dp-fed-bnsl"}
        assert (df["skeleton_correct_mean"] <= 18).all()
    pngs = list(tmp_path.glob("*.png"))
    if _has_matplotlib():
        assert len(pngs) == 1 and pngs[0].stat().st_size > 1000
        assert pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_without_matplotlib_tables_only_and_a_note(tmp_path):
    fake = tmp_path / "fake"
    (fake / "matplotlib").mkdir(parents=True)
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('matplotlib hidden for this test')\n")
    out = tmp_path / "out"
    proc = run_example("convergence", out, {"PYTHONPATH": str(fake)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "convergence.csv").is_file()
    assert not list(out.glob("*.png"))
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("note:") and "matplotlib" in ln]
    assert len(notes) == 1


def test_the_readme_knowledge_file_is_shipped_and_runs(tmp_path):
    """The tier file of docs/cli.md's knowledge section (moved there from the README) is
    examples/tiny/knowledge.txt, and its command runs as shown."""
    reference = (EXAMPLES.parent / "docs" / "cli.md").read_text(encoding="utf-8")
    shipped = (EXAMPLES / "tiny" / "knowledge.txt").read_text(encoding="utf-8")
    block = reference.split("# nothing causes x8; x2 is measured last", 1)[1].split("```", 1)[0]
    assert shipped.strip().endswith(block.strip())
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "bnsl_cli", "learn", str(EXAMPLES / "tiny" / "shards"), "--seed", "1", "--knowledge",
         str(EXAMPLES / "tiny" / "knowledge.txt"), "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "knowledge: 1 required, 1 forbidden, 3 tiers" in proc.stderr
