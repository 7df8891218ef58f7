"""Writing a command's output directory safely (shared by learn and refit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from bnsl_cli.errors import InputDataError


def is_bnsl_output(directory: Path) -> bool:
    rep = directory / "report.json"
    if not rep.is_file():
        return False
    try:
        obj = json.loads(rep.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and "schema_version" in obj


def check_output_dir(directory: Path, names: Iterable[str], inputs: Iterable[Path], force: bool) -> None:
    """Refuse to clobber files bnsl did not write or any input file, before any work is done."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputDataError(f"{directory}: exists and is not a directory")
    targets = {(directory / n).resolve() for n in names}
    for p in inputs:
        if Path(p).resolve() in targets:
            raise InputDataError(f"{p}: is an input and would be overwritten by the output in {directory}")
    if force or not directory.exists() or is_bnsl_output(directory):
        return
    clash = [n for n in names if (directory / n).exists()]
    if clash:
        raise InputDataError(
            f"{directory}: already holds {clash[0]} that bnsl did not write; choose another --out or pass --force"
        )
