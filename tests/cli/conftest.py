"""Fixtures shared by the CLI tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests._shards import TINY


@pytest.fixture()
def shards(tmp_path) -> Path:
    """A copy of ``examples/tiny/shards`` at ``tmp_path / "shards"`` (a test may change it)."""
    dst = tmp_path / "shards"
    shutil.copytree(TINY / "shards", dst)
    return dst
