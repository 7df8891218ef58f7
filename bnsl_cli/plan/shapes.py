"""The data's public shape: column names and, per participant, its label, row count and file hash."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bnsl_cli.errors import OptionError

__all__ = ["ParticipantShape", "Shapes"]


@dataclass(frozen=True)
class ParticipantShape:
    """What is public about one participant: its label (file), its row count, and the file's
    SHA-256 when known."""

    label: str
    rows: int
    sha256: Optional[str] = None

    def to_dict(self) -> dict:
        return {"label": self.label, "rows": self.rows, "sha256": self.sha256}


@dataclass(frozen=True)
class Shapes:
    """Column names and the participants' public shapes; ``columns``: the variables' kinds when some
    are categorical (:class:`~bnsl_cli.io.kinds.ColumnKinds`; ``names`` are then the expanded columns
    the sites' statistics are over)."""

    names: tuple
    participants: tuple
    columns: Optional[object] = None

    @classmethod
    def of_tables(cls, tables) -> "Shapes":
        if not tables:
            raise OptionError("no participants: give at least one shard")
        names = tuple(tables[0].names)
        return cls(
            names,
            tuple(ParticipantShape(str(t.path), int(t.n), getattr(t, "sha256", None)) for t in tables),
            getattr(tables[0], "columns", None),
        )
