"""Every fenced code block of README.md and docs/**/*.md, checked by kind: DAG modules pass
`beatflow dags check`, other Python compiles and runs, `beatflow …` lines parse against the real
CLI, `make` targets exist, YAML and JSON parse, and every BEATFLOW_* name is a setting.

A block the test cannot run says so on the line before it, with a reason:
``<!-- docs-test: compile-only (needs a running broker) -->`` or ``<!-- docs-test: skip (…) -->``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import re
import shlex
import subprocess
import symtable
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from beatflow.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "gen"))
import reference  # noqa: E402  (docs/gen/reference.py: the settings as the docs site lists them)

LANGUAGES = {"python", "bash", "console", "text", "yaml", "json"}
MARKER = re.compile(r"<!--\s*docs-test:\s*(skip|compile-only)\s*\((?P<reason>[^)]+)\)\s*-->")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
ENV_NAME = re.compile(r"\bBEATFLOW_[A-Z0-9_]*[A-Z0-9]")
# BEATFLOW_* variables the docs may name that are not settings: who reads them.
NOT_SETTINGS = {
    "BEATFLOW_TEST_REDIS_URL": "tests/services/__init__.py",
    "BEATFLOW_TEST_DATABASE_URL": "tests/services/__init__.py",
    "BEATFLOW_TEST_FORCE_THROWAWAY": "tests/services/_base.py",
    "BEATFLOW_TEST_ARTIFACTS": "tests/artifacts.py",
    "BEATFLOW_APP": "platform/beatflow/cli/__init__.py",
    "BEATFLOW_BASE_IMAGE": "deploy/image.sh",
    "BEATFLOW_PODMAN_RUNTIME": "deploy/image.sh",
    "BEATFLOW_PODMAN_FLAGS": "deploy/image.sh",
    "BEATFLOW_SERVICE_IMAGES": "deploy/image.sh",
}


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    file: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # "skip" or "compile-only"

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> Iterator[Block]:
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marked = MARKER.search(previous)
        end = next(
            (k for k in range(i + 1, len(lines)) if lines[k].strip() == "```"),
            None,
        )
        assert end is not None, f"{path.relative_to(ROOT)}:{i + 1}: code block never closed"
        indent = len(opening["indent"])
        body = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        yield Block(path, i + 1, opening["lang"], body, marked.group(1) if marked else None)
        i = end + 1


ALL_BLOCKS = [block for path in doc_files() for block in blocks_of(path)]


def blocks(*langs: str) -> list[pytest.param]:  # type: ignore[valid-type]
    return [pytest.param(b, id=b.where) for b in ALL_BLOCKS if b.lang in langs]


def test_the_docs_have_code_blocks_to_check() -> None:
    # A parser that found nothing would pass every check below.
    assert len(blocks("python")) >= 10 and len(blocks("bash", "console")) >= 20


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where) for b in ALL_BLOCKS])
def test_every_code_block_names_a_language_the_test_checks(block: Block) -> None:
    assert block.lang in LANGUAGES, (
        f"{block.where}: a code block needs a language this test knows ({sorted(LANGUAGES)}), "
        f"so that it is checked: got {block.lang!r}"
    )


# ------------------------------------------------------------------------------------ Python


def named_file(block: Block) -> str | None:
    """'dags/etl.py' from a block whose first line is '# dags/etl.py …'."""
    first = block.text.lstrip().splitlines()[0]
    found = re.match(r"#\s*([\w/.-]+\.(?:py|ya?ml))\b", first)
    return found.group(1) if found else None


def shipped_file(block: Block) -> Path | None:
    """The repository's file a block quotes, if its first line names one."""
    name = named_file(block)
    return ROOT / name if name and (ROOT / name).is_file() else None


def is_dag_module(block: Block) -> bool:
    shipped = shipped_file(block)
    if shipped is not None:
        return shipped.parent == ROOT / "dags"
    return "from beatflow import" in block.text and re.search(r"\bDAG\(", block.text) is not None


def dags_check(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from beatflow.cli import run; run(sys.argv[1:])",
            "dags",
            "check",
        ],
        cwd=folder.parent,
        env=_clean_env(BEATFLOW_DAGS_FOLDER=str(folder)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _clean_env(**extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    return {**env, "PYTHONPATH": str(ROOT / "platform"), **extra}


def non_blank(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def is_excerpt(excerpt: list[str], whole: list[str]) -> bool:
    n = len(excerpt)
    return any(whole[i : i + n] == excerpt for i in range(len(whole) - n + 1))


@pytest.mark.parametrize(
    "block", [p for p in blocks("python", "yaml") if shipped_file(p.values[0]) is not None]
)
def test_blocks_that_name_a_shipped_file_quote_it(block: Block) -> None:
    shipped = shipped_file(block)
    assert shipped is not None
    lines = non_blank(block.text)[1:]  # the first line names the file
    assert is_excerpt(lines, non_blank(shipped.read_text())), (
        f"{block.where} is not a quote of {shipped.relative_to(ROOT)} any more: "
        "copy the file's lines again"
    )


def undefined_names(source: str, where: str) -> set[str]:
    """Globals that functions of ``source`` read but nothing defines (a name error that only
    a call would raise, which running the module does not)."""
    table = symtable.symtable(source, where, "exec")
    defined = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    defined |= set(dir(builtins))
    missing: set[str] = set()

    def walk(scope: symtable.SymbolTable) -> None:
        for child in scope.get_children():
            missing.update(
                s.get_name()
                for s in child.get_symbols()
                if s.is_global() and s.is_referenced() and s.get_name() not in defined
            )
            walk(child)

    walk(table)
    return missing


@pytest.mark.parametrize("block", blocks("python"))
def test_python_blocks_compile_and_name_nothing_undefined(block: Block) -> None:
    if block.marker == "skip":
        pytest.skip(f"{block.where} is marked skip")
    compile(block.text, block.where, "exec")
    if shipped_file(block) is None:  # a quote is checked against its file instead
        missing = undefined_names(block.text, block.where)
        assert not missing, f"{block.where} uses names it never defines: {sorted(missing)}"


@pytest.mark.parametrize("block", [p for p in blocks("python") if is_dag_module(p.values[0])])
def test_dag_blocks_pass_beatflow_dags_check(block: Block, tmp_path: Path) -> None:
    if block.marker is not None:
        pytest.skip(f"{block.where} is marked {block.marker}")
    name = named_file(block)
    shipped = shipped_file(block)
    if shipped is not None:
        # A quote of a DAG the repository ships (checked as a quote below): check the file.
        source = shipped.read_text()
        module = shipped.name
    else:
        source = block.text
        module = Path(name).name if name else f"docs_block_{block.line}.py"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / module).write_text(source)
    result = dags_check(dags)
    assert result.returncode == 0 and " 0 broken" in result.stdout, (
        f"{block.where}: `beatflow dags check` refuses this DAG:\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize("block", [p for p in blocks("python") if not is_dag_module(p.values[0])])
def test_other_python_blocks_run(block: Block, tmp_path: Path) -> None:
    if block.marker is not None:
        pytest.skip(f"{block.where} is marked {block.marker}")
    name = named_file(block)
    module = tmp_path / (Path(name).name if name else "block.py")
    module.write_text(block.text)
    result = subprocess.run(
        [sys.executable, str(module)],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{block.where} fails when run:\n{result.stderr}"


# ------------------------------------------------------------------------------------ shell

REDIRECTS = {">", ">>", "<", "2>", "&>"}
SEPARATORS = {"&&", "||", "|", ";", "&"}


def shell_commands(text: str) -> Iterator[list[str]]:
    """Each simple command of a shell block, as words: continuation lines joined, prompts,
    comments, redirections and leading VAR=value assignments left out."""
    joined = re.sub(r"\\\n", " ", text)
    for raw in joined.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        skip_next = False
        for token in lexer:
            if skip_next:
                skip_next = False
            elif token in REDIRECTS:
                skip_next = True
            elif token in SEPARATORS:
                yield _without_assignments(words)
                words = []
            else:
                words.append(token)
        yield _without_assignments(words)


def _without_assignments(words: list[str]) -> list[str]:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    return words


def parse_beatflow(args: list[str]) -> None:
    """Parse ``beatflow ARGS`` with the real click commands, as `beatflow` would before running:
    unknown commands or options, bad choices and missing required values raise UsageError."""
    command: click.Command = cli_main
    ctx = click.Context(cli_main, info_name="beatflow")
    rest = list(args)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            raise click.UsageError(f"no such command {rest[0]!r}", ctx)
        ctx = click.Context(sub, info_name=rest[0], parent=ctx)
        command, rest = sub, rest[1:]
    with contextlib.suppress(click.exceptions.Exit):  # --help, --version
        command.make_context(ctx.info_name, rest, parent=ctx.parent)


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9][\w-]*)\s*:(?!=)", text, flags=re.MULTILINE))


@pytest.mark.parametrize("block", blocks("bash", "console"))
def test_shell_blocks_name_real_commands_options_and_make_targets(block: Block) -> None:
    if block.marker == "skip":
        pytest.skip(f"{block.where} is marked skip")
    targets = make_targets()
    for words in shell_commands(block.text):
        if not words:
            continue
        if words[0] == "beatflow":
            try:
                parse_beatflow(words[1:])
            except click.ClickException as exc:
                pytest.fail(f"{block.where}: `{shlex.join(words)}`: {exc.format_message()}")
        elif words[0] == "make":
            named = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            unknown = sorted(set(named) - targets)
            assert not unknown, f"{block.where}: no make target {unknown} in the Makefile"


def test_the_shell_check_catches_a_wrong_command_option_or_value() -> None:
    parse_beatflow(["dags", "trigger", "example_etl", "--conf", "{}", "--wait"])
    for wrong in (
        ["dags", "trgger", "example_etl"],
        ["dags", "trigger", "example_etl", "--wiat"],
        ["runs", "mark", "d", "r", "--state", "succeeded"],
        ["dags", "backfill", "d", "--start", "2026-01-01"],
    ):
        with pytest.raises(click.UsageError):
            parse_beatflow(wrong)


def test_shell_commands_are_split_into_simple_commands() -> None:
    text = "X=1 beatflow dags check && beatflow runs list > out.json  # note\nmake \\\n  docs\n"
    assert list(shell_commands(text)) == [
        ["beatflow", "dags", "check"],
        ["beatflow", "runs", "list"],
        ["make", "docs"],
    ]


# ------------------------------------------------------------------------------------ data


@pytest.mark.parametrize("block", blocks("yaml"))
def test_yaml_blocks_parse(block: Block) -> None:
    list(yaml.safe_load_all(block.text))


@pytest.mark.parametrize("block", blocks("json"))
def test_json_blocks_parse(block: Block) -> None:
    json.loads(block.text)


# ------------------------------------------------------------------------------------ settings


def test_every_beatflow_variable_the_docs_name_is_a_setting() -> None:
    variables = set(reference.setting_variables())
    known = variables | {v + "_FILE" for v in reference.file_variables()}
    texts = {p: p.read_text() for p in doc_files()}
    texts.update({p: p.read_text() for p in (ROOT / "docs" / "gen").glob("*.yml")})
    unknown = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path, text in texts.items()
        for name in set(ENV_NAME.findall(text))
        if name not in known and name not in NOT_SETTINGS and not name.startswith("BEATFLOW_CELERY")
    )
    assert not unknown, f"not a setting (Settings has {len(variables)}): {unknown}"


def test_the_variables_the_docs_name_besides_settings_are_read_where_listed() -> None:
    for name, path in NOT_SETTINGS.items():
        assert name in (ROOT / path).read_text(), f"{name} is not read in {path} any more"


def test_marked_blocks_give_a_reason() -> None:
    for path in doc_files():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if "docs-test:" in line:
                assert MARKER.search(line), (
                    f"{path.relative_to(ROOT)}:{number}: write the marker as "
                    "<!-- docs-test: skip|compile-only (the reason) -->"
                )


# ------------------------------------------------------------------------------------ paths

PATH_NAME = re.compile(r"`([A-Za-z0-9_.][A-Za-z0-9_./-]*/[A-Za-z0-9_./-]*)`")


def test_every_path_the_docs_name_exists() -> None:
    # Files and folders of the repository (or of the package: `execution/canvas.py`) named in
    # backticks; a page that names a moved or deleted file says something false.
    created = {named_file(b) for b in ALL_BLOCKS if b.lang in ("python", "yaml")}
    ignored = [line for line in (ROOT / ".gitignore").read_text().splitlines() if line.strip()]
    texts = {p: p.read_text() for p in [*doc_files(), ROOT / "bench" / "RESULTS.md"]}
    texts.update({p: p.read_text() for p in (ROOT / "docs" / "gen").glob("*.yml")})
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path, text in texts.items()
        for name in set(PATH_NAME.findall(text))
        if "://" not in name
        and name not in created
        and not any(name.startswith(prefix) for prefix in ignored)  # made by a make target
        and not (ROOT / name).exists()
        and not (ROOT / "platform" / "beatflow" / name).exists()
    )
    assert not missing, f"no such file or folder: {missing}"
