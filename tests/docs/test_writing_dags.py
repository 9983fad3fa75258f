"""The README's "Writing DAGs" section: each of its DAG modules passes `beatflow dags check` (the
first a scheduled DAG whose params all have defaults), every block of it is checked (none marked
skip), and its example DAG has the task groups and params the section describes."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from beatflow.dag import authoring
from tests.docs.test_code_blocks import ROOT, Block, blocks_of, dags_check

SECTION = "## Writing DAGs"


def section_blocks() -> list[Block]:
    text = (ROOT / "README.md").read_text().splitlines()
    start = text.index(SECTION) + 1
    end = next((i for i in range(start, len(text)) if text[i].startswith("## ")), len(text))
    return [b for b in blocks_of(ROOT / "README.md") if start < b.line <= end]


def orders_block() -> Block:
    [module] = [b for b in section_blocks() if b.lang == "python" and '"orders",' in b.text]
    return module


def test_the_section_has_dag_modules_and_a_shell_block_and_skips_none() -> None:
    blocks = section_blocks()
    assert [b.lang for b in blocks][:2] == ["python", "bash"]
    assert all(b.lang in ("python", "bash") for b in blocks)
    assert all(b.marker is None for b in blocks), "every block of Writing DAGs must be checked"


@pytest.mark.parametrize(
    "module", [pytest.param(b, id=b.where) for b in section_blocks() if b.lang == "python"]
)
def test_each_of_its_dags_passes_dags_check(module: Block, tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"readme_{module.line}.py").write_text(module.text)
    result = dags_check(dags)
    assert result.returncode == 0 and "1 DAGs loaded, 0 broken" in result.stdout, (
        f"{module.where}: `beatflow dags check` refuses the README's example:\n"
        f"{result.stdout}{result.stderr}"
    )


def test_its_dag_is_scheduled_grouped_and_typed_as_the_text_says(tmp_path: Path) -> None:
    module = orders_block()
    path = tmp_path / "orders.py"
    path.write_text(module.text)
    made: list[object] = []
    token = authoring._collector.set(made)  # type: ignore[arg-type]
    try:
        runpy.run_path(str(path))
    finally:
        authoring._collector.reset(token)
    [dag] = made
    assert dag.schedule is not None  # type: ignore[attr-defined]
    assert "extract.pull" in dag.tasks and "extract.market" in dag.tasks  # type: ignore[attr-defined]
    assert dag.tasks["extract.market"].queue == "io"  # type: ignore[attr-defined]
    assert dag.resolve_conf(None) == {"table": "orders", "limit": 1000}  # type: ignore[attr-defined]
