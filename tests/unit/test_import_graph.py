"""The package's import graph, read from the source (AST, no import): packages form no cycle and
no module imports a layer above its own, lazy (function-level) imports included.

Imports under ``if TYPE_CHECKING:`` count too: they never run, but a type named from a layer
above is a cycle in the design all the same (``beatflow/runtime.py`` names the lease keeper it
holds by a protocol of its own, not by ``execution.lease``). A violation that is known and
being removed is listed in ALLOWED with who removes it; the list only shrinks, and an entry that
no longer matches an import fails the test so it is deleted. No module imports a private
(``_name``) name from another package either: a name another package needs gets a public one."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "platform" / "beatflow"

# Bottom first. A module may import its own layer and the layers below. "beatflow" is the
# package facade (beatflow/__init__.py: `from beatflow import DAG, task`, `celery -A beatflow`):
# for users, not for the package's own modules.
LAYERS: list[set[str]] = [
    {
        "states",
        "errors",
        "extras",
        "keys",
        "ids",
        "settings",
        "logs",
        "connections",
        "queues",
        "times",
        "records_json",
        "celery_passthrough",
        "broker_transport",
    },
    {"dag"},
    {"store"},
    {"runtime"},  # holds the dags folder and the store (by type), used by everything above
    {"execution", "plain"},
    {"notify"},  # callbacks and notifiers: below the worker and runs, which call them
    {"runs"},
    {"worker"},  # the worker side: the node wrapper and its tasks, closing runs through runs
    {"scheduler"},
    {"observability"},
    {"app"},
    {"dev", "web", "chaos"},
    # compat: Airflow DAG files on the authoring API, the native sensors and trigger; the loader
    # finds it by name (nothing imports it)
    {"cli", "beatflow", "sensors", "compat"},
]

# (importing module, imported module) -> who removes it. Only shrinks.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    source: str  # module, e.g. beatflow.runs.fire
    target: str  # module or package imported, e.g. beatflow.execution.options
    line: int
    lazy: bool
    typing: bool = False  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        how = "lazy import" if self.lazy else "import"
        how = f"type-checking {how}" if self.typing else how
        return f"{self.source}:{self.line} {how} {self.target}"


def package_of(module: str) -> str:
    """The top-level part of beatflow a module belongs to: 'beatflow.runs.fire' -> 'runs'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "beatflow"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def _function_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inside.update(id(n) for n in ast.walk(node) if n is not node)
    return inside


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def edges_of(path: Path) -> Iterator[Edge]:
    yield from edges_in(path.read_text(), module_name(path), path.name == "__init__.py")


def edges_in(source: str, module: str, is_package: bool = False) -> Iterator[Edge]:
    tree = ast.parse(source, module)
    typing, lazy = _type_checking_nodes(tree), _function_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node, is_package)
            # `from beatflow.runs import fire` imports the submodule when there is one
            targets = [
                f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names
            ]
        else:
            continue
        for target in dict.fromkeys(targets):
            if target == "beatflow" or target.startswith("beatflow."):
                yield Edge(module, target, node.lineno, id(node) in lazy, id(node) in typing)


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def all_edges() -> list[Edge]:
    return [edge for path in sorted(PACKAGE.rglob("*.py")) for edge in edges_of(path)]


def layer_of(package: str) -> int:
    for index, layer in enumerate(LAYERS):
        if package in layer:
            return index
    raise AssertionError(
        f"package beatflow.{package} is in no layer: add it to LAYERS in {__file__}"
    )


def upward(edges: list[Edge]) -> list[Edge]:
    return [
        e
        for e in edges
        if layer_of(package_of(e.target)) > layer_of(package_of(e.source))
        and (e.source, e.target) not in ALLOWED
    ]


def package_cycles(edges: list[Edge]) -> list[list[str]]:
    """The sets of two or more packages that reach one another (each a cycle or several)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        a, b = package_of(e.source), package_of(e.target)
        if a != b and (e.source, e.target) not in ALLOWED:
            graph[a].add(b)

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reached = {p: reach(p) for p in list(graph)}
    groups = {
        frozenset({p} | {q for q in reached[p] if p in reached.get(q, set())})
        for p in reached
        if p in reached[p]
    }
    return sorted(sorted(g) for g in groups)


def test_every_package_has_a_layer() -> None:
    packages = {package_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    for package in sorted(packages):
        layer_of(package)


def test_no_import_runs_up_a_layer() -> None:
    bad = upward(all_edges())
    assert not bad, "imports that run up a layer (see LAYERS):\n" + "\n".join(
        f"  {e}  ({package_of(e.source)} is below {package_of(e.target)})" for e in bad
    )


def test_no_cycle_between_packages() -> None:
    edges = all_edges()
    cycles = package_cycles(edges)
    detail = []
    for cycle in cycles:
        members = set(cycle)
        detail += [
            f"  {e}"
            for e in edges
            if package_of(e.source) in members
            and package_of(e.target) in members
            and package_of(e.source) != package_of(e.target)
        ]
    assert not cycles, f"package cycles {cycles}:\n" + "\n".join(detail)


def private_imports_in(source: str, module: str, is_package: bool = False) -> list[str]:
    """``from beatflow.<other package>... import _name``: a private name taken across packages
    (give it a public name in its home instead)."""
    found = []
    for node in ast.walk(ast.parse(source, module)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = _absolute(module, node, is_package)
        if not base.startswith("beatflow.") or package_of(base) == package_of(module):
            continue
        found += [
            f"{module}:{node.lineno} imports {a.name} from {base}"
            for a in node.names
            if a.name.startswith("_") and not a.name.startswith("__")
        ]
    return found


def test_no_module_imports_a_private_name_from_another_package() -> None:
    bad = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in private_imports_in(
            path.read_text(), module_name(path), path.name == "__init__.py"
        )
    ]
    assert not bad, "private names imported across packages:\n" + "\n".join(bad)


def test_checker_sees_a_private_import_across_packages_only() -> None:
    source = (
        "from beatflow.dag.authoring import _context, context\n"
        "from beatflow.worker.claim import _helper\n"
    )
    assert private_imports_in(source, "beatflow.worker.node") == [
        "beatflow.worker.node:1 imports _context from beatflow.dag.authoring"
    ]


def test_allowed_violations_still_exist() -> None:
    current = {(e.source, e.target) for e in all_edges()}
    gone = [pair for pair in ALLOWED if pair not in current]
    assert not gone, f"fixed, delete from ALLOWED: {gone}"


# The checker itself: a test that cannot fail proves nothing.


def test_checker_sees_lazy_relative_and_type_only_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import engine\n"
        "if TYPE_CHECKING:\n"
        "    from beatflow.app import create_app\n"
        "def f():\n"
        "    from beatflow.cli import main\n"
    )
    edges = sorted(edges_in(source, "beatflow.store.x"), key=lambda e: e.line)
    assert edges == [
        Edge("beatflow.store.x", "beatflow.store.engine", 2, False),
        Edge("beatflow.store.x", "beatflow.app", 4, False, True),
        Edge("beatflow.store.x", "beatflow.cli", 6, True),
    ]
    assert upward(edges) == [edges[1], edges[2]]


def test_checker_finds_a_cycle_made_only_at_type_level() -> None:
    runtime = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from beatflow.execution.lease import LeaseKeeper\n"
    )
    lease = "from beatflow.runtime import Runtime\n"
    edges = [*edges_in(runtime, "beatflow.runtime"), *edges_in(lease, "beatflow.execution.lease")]
    assert package_cycles(edges) == [["execution", "runtime"]]


def test_checker_finds_a_cycle() -> None:
    edges = [
        Edge("beatflow.worker.tasks", "beatflow.runs.fire", 1, False),
        Edge("beatflow.runs.fire", "beatflow.worker.node", 1, False),
        Edge("beatflow.runs.fire", "beatflow.errors", 1, False),
    ]
    assert package_cycles(edges) == [["runs", "worker"]]
