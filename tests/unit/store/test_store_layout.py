"""The store's shape, read from its source (AST, no import): no part reaches into another
part's private helpers, no part asks which database it is on (``backends/`` holds what differs),
and no module outgrows a screenful of responsibilities."""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).resolve().parents[3] / "platform" / "beatflow" / "store"
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for p in STORE.rglob("*.py") if "migrations" not in p.parts)


def test_no_store_module_imports_a_private_name_from_another() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("beatflow"):
                found += [
                    f"{path.relative_to(STORE)}:{node.lineno} imports {a.name} from {node.module}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert not found


def _asks_for_the_dialect(node: ast.AST) -> bool:
    """``x.dialect == ...``, ``x.dialect.name != ...``, ``dialect == ...`` and the like."""
    if not isinstance(node, ast.Compare):
        return False
    for side in (node.left, *node.comparators):
        text = ast.unparse(side)
        if text == "dialect" or text.endswith((".dialect", "dialect.name")):
            return True
    return False


def test_only_the_backends_tell_postgresql_from_sqlite() -> None:
    # engine.py's UTCDateTime is SQLAlchemy's type hook, handed the dialect on every value
    allowed = {STORE / "engine.py"}
    found = [
        f"{path.relative_to(STORE)}:{node.lineno}: {ast.unparse(node)}"
        for path in _modules()
        if "backends" not in path.parts and path not in allowed
        for node in ast.walk(ast.parse(path.read_text()))
        if _asks_for_the_dialect(node)
    ]
    assert not found


def test_every_store_module_but_the_migrations_is_under_400_lines() -> None:
    long = {
        str(p.relative_to(STORE)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long


def test_the_checks_see_what_they_look_for() -> None:
    tree = ast.parse("if self.dialect == 'postgresql': pass\nif conn.dialect.name != 'x': pass")
    assert sum(_asks_for_the_dialect(n) for n in ast.walk(tree)) == 2
