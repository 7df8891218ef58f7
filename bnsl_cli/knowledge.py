"""Prior knowledge: required edges, forbidden edges and tiers.

A user states what is known before learning: ``--require A->B`` (the edge must be in the graph),
``--forbid A->B`` (it must not be), and in a ``--knowledge FILE`` also **tiers** (no edge from a
later tier into an earlier one: "nothing causes age"). The text format, one statement a line::

    # comments start with '#'
    require age -> bp
    forbid  bp -> age
    tier 1: age sex
    tier 2: bp chol

bnlearn-style whitelists / blacklists (a CSV with a ``from,to`` header, one arc a line) are read by
``--require-file`` / ``--forbid-file``, and so are whole graphs (a BIF file, a bnlearn model string, a
dagitty graph: every edge an arc) when the caller hands in the io layer's reader.

:class:`KnowledgeSource` holds the statements as given (parsed before any data are read, so a bad
file fails first); :meth:`KnowledgeSource.resolve` checks them against the column names and returns
the immutable :class:`Knowledge` of the run plan: index pairs, the forbidden mask (d × d bool, the
diagonal and every tier violation included) and the required mask. Every method enforces the same
two masks. A contradiction (an unknown name, a required edge that is also forbidden or points into
an earlier tier, required edges forming a cycle, a variable in two tiers) is an :class:`OptionError`
whose one-line message names the edge and where it was stated.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from bnsl_cli.errors import BnslError, OptionError

__all__ = ["Rule", "KnowledgeSource", "Knowledge", "parse_edge", "read_knowledge_file", "read_arc_file"]


@dataclass(frozen=True)
class Rule:
    """One statement as given: ``kind`` is ``require`` / ``forbid`` (``a -> b``) or ``tier``
    (``level`` and the variables in ``names``); ``where`` names its source for messages."""

    kind: str
    where: str
    a: str = ""
    b: str = ""
    level: int = 0
    names: tuple = ()


def parse_edge(text: str, where: str) -> tuple[str, str]:
    """``"A->B"`` / ``"A -> B"`` → ``("A", "B")``; an :class:`OptionError` naming ``where`` otherwise."""
    parts = str(text).split("->")
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise OptionError(f"{where}: expected an edge 'A->B', got {text!r}")
    return parts[0].strip(), parts[1].strip()


def _read_text(path: Path, option: str) -> list[str]:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise OptionError(f"{option} {path}: cannot read the file ({e.strerror or e})") from None
    try:
        return raw.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise OptionError(f"{option} {path}: not UTF-8 text") from None


def read_knowledge_file(path: Path) -> list[Rule]:
    """The statements of a knowledge file (format in the module docstring)."""
    rules = []
    for no, line in enumerate(_read_text(path, "--knowledge"), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        where = f"{path}:{no}"
        head, _, rest = text.partition(" ")
        head = head.lower()
        if head in ("require", "forbid"):
            a, b = parse_edge(rest, where)
            rules.append(Rule(head, where, a, b))
        elif head.startswith("tier"):
            label, colon, names = text[4:].partition(":")
            try:
                level = int(label.strip())
            except ValueError:
                level = None
            if not colon or level is None:
                raise OptionError(f"{where}: expected 'tier N: name name ...', got {text!r}")
            vars_ = tuple(names.split())
            if not vars_:
                raise OptionError(f"{where}: tier {level} names no variable")
            rules.append(Rule("tier", where, level=level, names=vars_))
        else:
            raise OptionError(
                f"{where}: unknown statement {head!r}; use 'require A -> B', 'forbid A -> B' or 'tier N: names'"
            )
    return rules


def read_arc_file(path: Path, kind: str, graph_arcs=None) -> list[Rule]:
    """A bnlearn-style whitelist (``kind="require"``) or blacklist (``"forbid"``): CSV with a
    ``from,to`` header, one arc a line; or, with ``graph_arcs(path, text)`` given (the io layer's
    :func:`bnsl_cli.io.graph_text_formats.graph_arcs`), a whole graph — a BIF file, a bnlearn model
    string, a dagitty graph — whose every edge is an arc."""
    option = "--require-file" if kind == "require" else "--forbid-file"
    lines = _read_text(path, option)
    if graph_arcs is not None:
        try:
            arcs = graph_arcs(Path(path), "\n".join(lines))
        except BnslError as exc:
            raise OptionError(f"{option} {exc}") from None
        if arcs is not None:
            return [Rule(kind, f"{path}: {a} -> {b}", a, b) for a, b in arcs]
    rows = list(csv.reader(lines))
    if not rows or [c.strip().lower() for c in rows[0][:2]] != ["from", "to"] or len(rows[0]) != 2:
        raise OptionError(f"{option} {path}:1: expected the header 'from,to'")
    rules = []
    for no, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise OptionError(f"{option} {path}:{no}: expected two names 'from,to', got {lines[no - 1]!r}")
        rules.append(Rule(kind, f"{path}:{no}", row[0].strip(), row[1].strip()))
    return rules


@dataclass(frozen=True)
class KnowledgeSource:
    """The user's statements, not yet checked against the data's columns."""

    rules: tuple = ()

    @classmethod
    def from_options(
        cls,
        require: Iterable[str] = (),
        forbid: Iterable[str] = (),
        files: Iterable[Path] = (),
        require_files: Iterable[Path] = (),
        forbid_files: Iterable[Path] = (),
        graph_arcs=None,
    ) -> Optional["KnowledgeSource"]:
        """The statements of the command-line options (``None`` when there are none); ``graph_arcs``:
        what reads a whole graph file as arcs (:func:`read_arc_file`)."""
        rules = []
        for text in require or ():
            rules.append(Rule("require", f"--require {text}", *parse_edge(text, f"--require {text}")))
        for text in forbid or ():
            rules.append(Rule("forbid", f"--forbid {text}", *parse_edge(text, f"--forbid {text}")))
        for p in files or ():
            rules.extend(read_knowledge_file(Path(p)))
        for p in require_files or ():
            rules.extend(read_arc_file(Path(p), "require", graph_arcs))
        for p in forbid_files or ():
            rules.extend(read_arc_file(Path(p), "forbid", graph_arcs))
        return cls(tuple(rules)) if rules else None

    def resolve(self, names: Sequence[str]) -> "Knowledge":
        """Check every statement against the columns ``names``; the run's :class:`Knowledge`."""
        names = tuple(str(n) for n in names)
        index = {n: i for i, n in enumerate(names)}

        def idx(name: str, rule: Rule) -> int:
            if name not in index:
                shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
                raise OptionError(f"{rule.where}: unknown variable {name!r} (the columns are {shown})")
            return index[name]

        required: dict = {}
        forbidden: dict = {}
        tier_of: dict = {}
        tier_where: dict = {}
        levels: dict = {}
        for r in self.rules:
            if r.kind == "tier":
                for n in r.names:
                    i = idx(n, r)
                    if i in tier_of and tier_of[i] != r.level:
                        raise OptionError(
                            f"{r.where}: {n} is already in tier {tier_of[i]} ({tier_where[i]}); a variable belongs to one tier"
                        )
                    tier_of[i], tier_where[i] = r.level, r.where
                    levels.setdefault(r.level, [])
                    if i not in levels[r.level]:
                        levels[r.level].append(i)
            else:
                i, j = idx(r.a, r), idx(r.b, r)
                if i == j:
                    if r.kind == "require":
                        raise OptionError(f"{r.where}: a required edge {r.a} -> {r.b} is a self-loop")
                    continue  # the diagonal is always forbidden
                (required if r.kind == "require" else forbidden).setdefault((i, j), r.where)
        for (i, j), where in required.items():
            if (i, j) in forbidden:
                raise OptionError(
                    f"{where}: {names[i]} -> {names[j]} is required but also forbidden ({forbidden[(i, j)]})"
                )
            if i in tier_of and j in tier_of and tier_of[i] > tier_of[j]:
                raise OptionError(
                    f"{where}: the required edge {names[i]} -> {names[j]} points from tier {tier_of[i]} "
                    f"into the earlier tier {tier_of[j]} ({tier_where[j]})"
                )
        cycle = _find_cycle(len(names), list(required))
        if cycle:
            path = " -> ".join(names[k] for k in cycle + [cycle[0]])
            raise OptionError(f"{required[(cycle[0], cycle[1 % len(cycle)])]}: the required edges form a cycle {path}")
        return Knowledge(
            names=names,
            required=tuple(sorted(required)),
            forbidden=tuple(sorted(forbidden)),
            tiers=tuple(tuple(levels[k]) for k in sorted(levels)),
        )


def _find_cycle(d: int, edges: list) -> list:
    """One directed cycle of the graph ``edges`` as a node list ([] when acyclic)."""
    children: dict = {}
    for i, j in edges:
        children.setdefault(i, []).append(j)
    state = [0] * d  # 0 new, 1 on stack, 2 done
    for s in range(d):
        if state[s]:
            continue
        stack = [(s, iter(children.get(s, ())))]
        path = [s]
        state[s] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state[nxt] == 1:
                return path[path.index(nxt):]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(children.get(nxt, ()))))
    return []


@dataclass(frozen=True)
class Knowledge:
    """Checked prior knowledge of a run (index pairs into ``names``; ``tiers`` in order, earliest
    first). The masks are what every method enforces."""

    names: tuple
    required: tuple = ()  # of (i, j)
    forbidden: tuple = ()  # of (i, j), as stated (the mask adds tiers and the diagonal)
    tiers: tuple = ()  # of tuples of indices
    _masks: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    @property
    def d(self) -> int:
        return len(self.names)

    def forbidden_mask(self) -> np.ndarray:
        """``F[i, j]``: the edge ``i → j`` may not appear (stated, against the tiers, or diagonal)."""
        if "F" not in self._masks:
            F = np.eye(self.d, dtype=bool)
            for i, j in self.forbidden:
                F[i, j] = True
            for t, later in enumerate(self.tiers):
                for earlier in self.tiers[:t]:
                    F[np.ix_(list(later), list(earlier))] = True
            F.setflags(write=False)
            self._masks["F"] = F
        return self._masks["F"]

    def required_mask(self) -> np.ndarray:
        """``R[i, j]``: the edge ``i → j`` must appear."""
        if "R" not in self._masks:
            R = np.zeros((self.d, self.d), dtype=bool)
            for i, j in self.required:
                R[i, j] = True
            R.setflags(write=False)
            self._masks["R"] = R
        return self._masks["R"]

    # -- serialisation (the run plan) -----------------------------------------------------
    def to_dict(self) -> dict:
        n = self.names
        return {
            "required": [[n[i], n[j]] for i, j in self.required],
            "forbidden": [[n[i], n[j]] for i, j in self.forbidden],
            "tiers": [[n[i] for i in t] for t in self.tiers],
        }

    @classmethod
    def from_dict(cls, d: dict, names: Sequence[str]) -> "Knowledge":
        """Back from :meth:`to_dict`, checked again against ``names`` (a plan received over the network)."""
        rules = [Rule("require", "plan knowledge", a, b) for a, b in d.get("required", ())]
        rules += [Rule("forbid", "plan knowledge", a, b) for a, b in d.get("forbidden", ())]
        rules += [Rule("tier", "plan knowledge", level=k + 1, names=tuple(t)) for k, t in enumerate(d.get("tiers", ()))]
        return KnowledgeSource(tuple(rules)).resolve(names)

    def summary(self) -> dict:
        """The report's ``knowledge`` entry: counts and the edges."""
        F = self.forbidden_mask()
        out = self.to_dict()
        return {
            "required_count": len(self.required),
            "forbidden_count": len(self.forbidden),
            "tier_count": len(self.tiers),
            "forbidden_pairs_total": int(F.sum() - self.d),  # stated + implied by the tiers (diagonal left out)
            **out,
        }
