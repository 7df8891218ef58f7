"""`bnsl learn` (not yet implemented)."""

from __future__ import annotations

import typer


def command() -> None:
    """Not implemented yet."""
    raise typer.Exit(1)
