"""Loading the dags folder: every module in isolation, so an import error, a cycle, an unknown
dependency or a duplicate id is reported by file and line while every other DAG still loads."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import re
import sys
import time
import traceback
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from beatflow.dag import authoring
from beatflow.dag.model import DAG
from beatflow.errors import DagError, DagNotFoundError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadError:
    """A module or DAG that did not load, and why."""

    file: str
    line: int | None
    message: str
    dag_id: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass(slots=True)
class DagBag:
    """The DAGs of one dags folder, and the errors of those that did not load."""

    folder: Path
    dags: dict[str, DAG] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    seconds: float = 0.0

    def get(self, dag_id: str) -> DAG:
        try:
            return self.dags[dag_id]
        except KeyError:
            raise DagNotFoundError(dag_id, list(self.dags), self._where(dag_id)) from None

    def _where(self, dag_id: str) -> str:
        """Where the DAG was looked for, and what to do: a newcomer's dags folder is often not
        where the process looks (another working directory, no BEATFLOW_DAGS_FOLDER)."""
        broken = [e for e in self.errors if e.dag_id == dag_id]
        if broken:
            return f"(its module does not load: {broken[0]}); see `beatflow dags check`"
        if not self.folder.is_dir():
            return (
                f"(the dags folder {self.folder} does not exist): set BEATFLOW_DAGS_FOLDER to "
                "the folder of your DAG modules, or run from the folder that holds dags/"
            )
        return (
            f"from {self.folder} ({len(self.dags)} DAGs, {len(self.errors)} broken); "
            "see `beatflow dags list`"
        )

    @property
    def ok(self) -> bool:
        return not self.errors


def _module_name(folder: Path, path: Path) -> str:
    rel = path.relative_to(folder).with_suffix("")
    return "beatflow_dags." + re.sub(r"\W", "_", "__".join(rel.parts))


def _error_line(exc: BaseException, path: Path) -> int | None:
    if isinstance(exc, SyntaxError) and exc.filename == str(path):
        return exc.lineno
    if isinstance(exc, DagError) and exc.file == str(path):
        return exc.line
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
    return lines[-1] if lines else None


def discover(folder: Path) -> list[Path]:
    """Python files under ``folder`` that may hold DAGs (not private, not caches), sorted."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.rglob("*.py")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(folder).parts)
    )


FolderVersion = tuple[tuple[str, int, int], ...]


def folder_version(folder: str | Path) -> FolderVersion:
    """(path, mtime, size) of every DAG module of ``folder``: a process imports the folder
    again only when this changes (a worker that meets a DAG task it does not know)."""
    out = []
    for path in discover(Path(folder)):
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(out)


def load_dags(folder: str | Path, *, skip_modules: Collection[str] = ()) -> DagBag:
    """Import every module of ``folder`` in isolation and collect its DAGs. ``skip_modules``
    (dotted names relative to ``folder``: BEATFLOW_IMPORTS) hold plain Celery tasks, not DAGs."""
    started = time.perf_counter()
    folder = Path(folder).resolve()
    bag = DagBag(folder=folder)
    if not folder.is_dir():
        bag.errors.append(
            LoadError(
                str(folder),
                None,
                "dags folder does not exist: set BEATFLOW_DAGS_FOLDER to the folder of your "
                "DAG modules",
            )
        )
        return bag
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # so DAG modules can import their own helpers
    seen: dict[str, DAG] = {}
    for path in discover(folder):
        if ".".join(path.relative_to(folder).with_suffix("").parts) in skip_modules:
            continue
        for dag_or_error in _load_module(folder, path):
            if isinstance(dag_or_error, LoadError):
                bag.errors.append(dag_or_error)
                continue
            dag = dag_or_error
            if dag.dag_id in RESERVED_DAG_IDS:
                bag.errors.append(
                    LoadError(
                        str(path),
                        dag.line,
                        f'DAG id "{dag.dag_id}" is reserved: its tasks would be Celery tasks '
                        f'named "{dag.dag_id}.<task>", the names of {dag.dag_id}\'s built-in '
                        "tasks (e.g. beatflow.segment); rename the DAG",
                        dag.dag_id,
                    )
                )
                continue
            if dag.dag_id in seen:
                first = seen[dag.dag_id]
                bag.errors.append(
                    LoadError(
                        str(path),
                        dag.line,
                        f'duplicate DAG id "{dag.dag_id}" (already defined at '
                        f"{first.file}:{first.line}); DAG ids must be unique in the dags folder",
                        dag.dag_id,
                    )
                )
                continue
            seen[dag.dag_id] = dag
            bag.dags[dag.dag_id] = dag
    check_task_names(bag, ())
    bag.seconds = time.perf_counter() - started
    for err in bag.errors:
        log.warning("DAG load error: %s", err, extra={"file": err.file, "dag_id": err.dag_id})
    return bag


def check_task_names(bag: DagBag, taken: Collection[str]) -> None:
    """Move to ``bag.errors`` every DAG one of whose Celery task names (``<dag_id>.<task_id>``)
    is in ``taken`` (plain Celery tasks from BEATFLOW_IMPORTS) or another DAG's: the second
    registration would silently leave the first task in place."""
    owners: dict[str, str] = {}
    for dag_id, dag in sorted(bag.dags.items()):
        clash = None
        for task_id in dag.tasks:
            name = f"{dag_id}.{task_id}"
            if name in taken:
                clash = f'a plain Celery task from BEATFLOW_IMPORTS is already named "{name}"'
            elif name in owners:
                clash = f'DAG "{owners[name]}" already has a task named "{name}"'
            if clash:
                break
        if clash is None:
            owners.update({f"{dag_id}.{t}": dag_id for t in dag.tasks})
            continue
        del bag.dags[dag_id]
        bag.errors.append(
            LoadError(
                str(dag.file or bag.folder),
                dag.line,
                f'DAG "{dag_id}": {clash}; rename the DAG or the task',
                dag_id,
            )
        )


# DAG ids whose tasks would take the names of built-in Celery tasks (beatflow.segment, ...)
RESERVED_DAG_IDS = frozenset({"beatflow", "celery"})


# Compatibility layers, looked up by name (they sit above the loader, which never imports them
# directly): when a DAG module's source names the package, the layer's import context is entered
# around the module's exec only, so the alias never reaches the rest of the process.
IMPORT_LAYERS: dict[str, tuple[str, str]] = {
    "airflow": ("beatflow.compat.airflow", "airflow_imports"),
}


def _import_layers(path: Path) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    try:
        source = path.read_bytes()
    except OSError:
        return stack
    for package, (module, factory) in IMPORT_LAYERS.items():
        if package.encode() in source:
            stack.enter_context(getattr(importlib.import_module(module), factory)())
    return stack


def _load_module(folder: Path, path: Path) -> list[DAG | LoadError]:
    name = _module_name(folder, path)
    collected: list[DAG] = []
    token = authoring._collector.set(collected)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            return [LoadError(str(path), None, "cannot be imported as a Python module")]
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            with _import_layers(path):
                spec.loader.exec_module(module)
        except BaseException as exc:  # isolation: nothing a module does stops the load
            sys.modules.pop(name, None)
            if isinstance(exc, KeyboardInterrupt):
                raise
            message = exc.message if isinstance(exc, DagError) else (f"{type(exc).__name__}: {exc}")
            return [LoadError(str(path), _error_line(exc, path), message)]
    finally:
        authoring._collector.reset(token)
    out: list[DAG | LoadError] = []
    # A module that imports another DAG module runs that module's DAG blocks too: keep only the
    # DAGs written in this file (the other file is loaded, and reported, on its own).
    for dag in (d for d in collected if d.file is None or Path(d.file) == path):
        try:
            dag.validate()
        except DagError as exc:
            out.append(LoadError(exc.file or str(path), exc.line, exc.message, dag.dag_id))
            continue
        out.append(dag)
    return out
