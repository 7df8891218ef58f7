"""The repository itself: no file tracked by git is larger than 1 MB, so that binaries (wheels,
archives, generated data) stay out of the history. Data the tests and examples need is kept once
(the Sachs data lives in ``examples/sachs/``, which the tests read too)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The largest file the repository may track, in bytes.
LIMIT = 1_000_000


def tracked_files(root: Path) -> list[Path]:
    """Every file git tracks under ``root`` (``git ls-files``); skips the test where git or the
    repository's ``.git`` is unavailable (an unpacked source archive, a machine without git)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    if not (root / ".git").exists():
        pytest.skip(f"{root} is not a git checkout")
    res = subprocess.run([git, "ls-files", "-z"], cwd=root, capture_output=True, timeout=60)
    if res.returncode != 0:
        pytest.skip(f"git ls-files failed: {res.stderr.decode(errors='replace').strip()}")
    return [root / name for name in res.stdout.decode("utf-8", errors="surrogateescape").split("\0") if name]


def oversized(files, limit: int = LIMIT) -> list[str]:
    """``"path (N bytes)"`` for each of ``files`` larger than ``limit`` bytes (a file deleted from
    the working tree but still tracked is not read)."""
    out = []
    for path in files:
        if path.is_file() and not path.is_symlink():
            size = path.stat().st_size
            if size > limit:
                out.append(f"{path} ({size} bytes)")
    return out


def test_no_tracked_file_is_larger_than_1_mb():
    big = oversized(tracked_files(ROOT))
    assert not big, (
        f"files over {LIMIT} bytes are tracked by git (keep binaries out of the repository; `git rm` them): "
        + ", ".join(big)
    )


def test_the_size_check_can_fail(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    (tmp_path / "small.txt").write_text("x\n")
    (tmp_path / "big.bin").write_bytes(b"\0" * (LIMIT + 1))
    (tmp_path / "untracked.bin").write_bytes(b"\0" * (LIMIT + 1))
    subprocess.run(["git", "add", "small.txt", "big.bin"], cwd=tmp_path, check=True, timeout=60)
    big = oversized(tracked_files(tmp_path))
    assert big == [f"{tmp_path / 'big.bin'} ({LIMIT + 1} bytes)"]


def test_the_sachs_data_is_kept_once():
    assert (ROOT / "examples" / "sachs" / "sachs.csv").is_file()
    assert not (ROOT / "tests" / "data" / "sachs.csv").exists()
