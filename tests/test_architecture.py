"""The package's architecture, read from its source with ``ast`` (nothing is run):

- no method's name is compared or listed outside the method registry (``bnsl_cli/federated/methods/``):
  every other module reads a registry attribute instead;
- the import graph has no circle, and no module imports from a layer above its own
  (cli > run > plan > federated > solvers / privacy / io > ground).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bnsl_cli.federated.methods.registry import METHODS

PACKAGE = Path(__file__).resolve().parents[1] / "bnsl_cli"
REGISTRY = PACKAGE / "federated" / "methods"


def _sources(root: Path = PACKAGE):
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# ------------------------------------------------------------------------------------------------
# method names
# ------------------------------------------------------------------------------------------------


def method_literals(tree: ast.AST, names) -> list[tuple[int, str, str]]:
    """``(line, how, name)`` for every string literal equal to a method name that is compared
    (``==``, ``!=``, ``in``, ``is``, a ``match`` case) or listed (an element of a list, tuple or set,
    a key or value of a dict, or assigned to a name at module or class level, as an enum member)."""
    names = set(names)
    found = []

    def is_name(node) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                if is_name(operand):
                    found.append((node.lineno, "compared", operand.value))
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for elt in node.elts:
                if is_name(elt):
                    found.append((node.lineno, "listed", elt.value))
        elif isinstance(node, ast.Dict):
            for item in [*node.keys, *node.values]:
                if item is not None and is_name(item):
                    found.append((node.lineno, "listed", item.value))
        elif isinstance(node, ast.MatchValue) and is_name(node.value):
            found.append((node.lineno, "matched", node.value.value))
        elif isinstance(node, (ast.Module, ast.ClassDef)):
            for stmt in node.body:
                value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
                if value is not None and is_name(value):
                    found.append((stmt.lineno, "assigned", value.value))
    return found


def test_no_method_name_is_compared_or_listed_outside_the_registry():
    offenders = []
    for path, tree in _sources():
        if REGISTRY in path.parents:
            continue
        for line, how, name in method_literals(tree, METHODS):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name!r} {how}")
    assert not offenders, "read the registry (bnsl_cli.federated.methods.registry) instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "code",
    [
        'if plan.method == "fed-sparse": pass',
        'if "fed-bnsl" != method: pass',
        'ok = method in ("fed-sparse", "fed-bnsl")',
        'ADMM = ["fed-sparse"]',
        'title = {"fed-moments": "t"}.get(m)',
        'ONE = "notears"',
        'class Method(str, Enum):\n    fed_sparse = "fed-sparse"',
        'match m:\n    case "local-notears":\n        pass',
    ],
)
def test_the_method_name_scan_catches_every_form(code):
    """The scan can fail: each form the package used before the registry is caught."""
    assert method_literals(ast.parse(code), METHODS)


def test_the_method_name_scan_allows_reading_the_registry():
    code = (
        "spec = method_spec(plan.method)\n"
        "if spec.pooled and plan.method in PRIVATE_METHODS: pass\n"
        'label = f"{plan.method}: did not converge"\n'
        'opt = typer.Option("fed-sparse", "--method")\n'
    )
    assert not method_literals(ast.parse(code), METHODS)


# ------------------------------------------------------------------------------------------------
# the import graph
# ------------------------------------------------------------------------------------------------

#: Layers, highest first; a module may import from its own layer or a lower one.
LAYERS = (
    ("cli", ("bnsl_cli.cli", "bnsl_cli.__main__")),
    # the network transport and the site: the site's policy (bnsl_cli.net.policy) checks a plan and
    # builds the site's participant with the run's noise source, as run.py does in-process
    ("net", ("bnsl_cli.net",)),
    ("run", ("bnsl_cli.run", "bnsl_cli.learn", "bnsl_cli.report", "bnsl_cli.refit", "bnsl_cli.split",
             "bnsl_cli.bootstrap")),
    ("plan", ("bnsl_cli.plan",)),
    ("federated", ("bnsl_cli.federated",)),
    ("solvers/privacy/io", ("bnsl_cli.solvers", "bnsl_cli.privacy", "bnsl_cli.io")),
    ("ground", ("bnsl_cli.errors", "bnsl_cli.dag", "bnsl_cli.stats", "bnsl_cli.numerics", "bnsl_cli.metrics",
                "bnsl_cli.simulate", "bnsl_cli")),
)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` (0 = top); the longest matching prefix decides."""
    best, rank = -1, None
    for k, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), k
    if rank is None:
        raise AssertionError(f"{module} is in no layer; add it to LAYERS")
    return rank


def import_graph(root: Path = PACKAGE) -> dict[str, set]:
    """``module -> modules of the package it imports`` (at any depth of the module: deferred
    imports count too). ``from a.b import c`` is an edge to ``a.b.c`` when that is a module,
    else to ``a.b``. The implicit import of a parent package is not an edge."""
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    top = root.name
    graph: dict[str, set] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                if target == top or target.startswith(top + "."):
                    while target not in modules and "." in target:
                        target = target.rpartition(".")[0]
                    if target != name:
                        edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def upward_imports(graph: dict[str, set]) -> list[str]:
    return sorted(
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in graph.items()
        for b in targets
        if layer_of(b) < layer_of(a)
    )


def test_the_import_graph_has_no_circle():
    assert cycles(import_graph()) == []


def test_no_module_imports_from_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_the_graph_checks_can_fail():
    """A circle and an upward import are found (the checks are not vacuous)."""
    graph = {"bnsl_cli.plan": {"bnsl_cli.run"}, "bnsl_cli.run": {"bnsl_cli.plan"}, "bnsl_cli.dag": {"bnsl_cli.io.graphs"}}
    assert cycles(graph) == [["bnsl_cli.plan", "bnsl_cli.run"]]
    assert upward_imports(graph) == [
        "bnsl_cli.dag (ground) imports bnsl_cli.io.graphs (solvers/privacy/io)",
        "bnsl_cli.plan (plan) imports bnsl_cli.run (run)",
    ]


def test_library_imports_stand_at_the_top_of_their_modules():
    """Outside ``cli/`` (start-up) imports of the package stand at module level, so that the graph
    above is the real one — except in modules of the optional network extra, which defer
    ``grpc``/``cryptography`` and the modules that need them."""
    deferred = []
    for path, tree in _sources():
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cli" or rel.parts[0] == "net" or rel.name == "secure_sum.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("bnsl_cli"):
                        deferred.append(f"{rel}:{inner.lineno}: from {inner.module}")
                    elif isinstance(inner, ast.Import) and any(a.name.startswith("bnsl_cli") for a in inner.names):
                        deferred.append(f"{rel}:{inner.lineno}: import")
    assert not deferred, "\n".join(deferred)


# ------------------------------------------------------------------------------------------------
# errors and exit codes
# ------------------------------------------------------------------------------------------------


def test_every_error_and_warning_class_lives_in_errors_py():
    defined = []
    for path, tree in _sources():
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Warning", "Exception")):
                defined.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert not defined, defined


def test_the_exit_code_tables_agree():
    """errors.py's table, its EXIT_CODES, the classes' exit codes, cli/app.py's docstring and the
    list in docs/cli.md (the command reference; the README links to it) name the same codes."""
    import re

    import bnsl_cli.cli.app as app_module
    from bnsl_cli import errors

    codes = set(errors.EXIT_CODES)
    classes = {getattr(errors, n).exit_code for n in errors.__all__ if hasattr(getattr(errors, n), "exit_code")}
    assert classes <= codes and {1, 2, 3, 4, 5, 6} <= classes
    table = {int(m) for m in re.findall(r"^(\d+)\s{2,}", errors.__doc__, flags=re.M)}
    assert table == codes
    app_doc = app_module.__doc__
    assert {int(m) for m in re.findall(r"(\d+) [a-z]", app_doc.split("Exit codes", 1)[1])} == codes
    reference = (PACKAGE.parent / "docs" / "cli.md").read_text(encoding="utf-8")
    start = reference.index("Exit codes: 0 ok")
    sentence = reference[start:reference.index("like other Unix tools", start)]
    assert {int(m) for m in re.findall(r"(?:[,;:]|\band)\s+(\d+)[ ,]", sentence)} == codes, sentence
