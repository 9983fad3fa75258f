"""``PythonVirtualenvOperator`` / ``@task.virtualenv`` and their branch kinds: a virtual
environment with the task's ``requirements`` (built by the stdlib's venv and pip, per run or once
in ``venv_cache_path``), then the callable runs in it as an external Python callable does: its
source, arguments and result as JSON only."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from beatflow.compat.airflow.external import ExternalPythonOperator, run_external
from beatflow.dag.flow import BRANCH

_DONE = "beatflow-venv.json"  # written last: a cached environment without it is rebuilt


def _python_for(version: str | None, task_id: str) -> str:
    """The interpreter the environment is made from: the worker's, or ``python<version>``."""
    if not version or str(version) == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return sys.executable
    found = shutil.which(f"python{version}")
    if found is None:
        raise FileNotFoundError(
            f'task "{task_id}": python_version={version!r} needs python{version} on the'
            " worker's PATH, and there is none"
        )
    return found


def _run(command: list[str], what: str, task_id: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
        raise RuntimeError(f'task "{task_id}": {what} failed (exit {done.returncode}): {last}')


def _build(op: PythonVirtualenvOperator, folder: Path, spec: Mapping[str, Any]) -> None:
    base = _python_for(op.python_version, op.task_id)
    command = [base, "-m", "venv", "--clear", str(folder)]
    if op.system_site_packages:
        command.insert(3, "--system-site-packages")
    _run(command, f"making a virtual environment in {folder}", op.task_id)
    if op.requirements:
        index: list[str] = []
        for n, url in enumerate(op.index_urls):
            index += ["--index-url" if n == 0 else "--extra-index-url", url]
        pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        pip += [*op.pip_install_options, *index, *op.requirements]
        _run(pip, f"pip install {' '.join(op.requirements)}", op.task_id)
    (folder / _DONE).write_text(json.dumps(spec), "utf-8")


@contextmanager
def environment(op: PythonVirtualenvOperator) -> Iterator[Path]:
    """The interpreter of ``op``'s environment: in ``venv_cache_path``, one per set of
    requirements, built once (a file lock keeps concurrent tasks from building it twice);
    otherwise a fresh one, removed afterwards."""
    spec = {
        "requirements": sorted(op.requirements),
        "python_version": op.python_version,
        "system_site_packages": op.system_site_packages,
        "pip_install_options": list(op.pip_install_options),
        "index_urls": list(op.index_urls),
    }
    if op.venv_cache_path is None:
        with tempfile.TemporaryDirectory(prefix="beatflow-venv-") as tmp:
            _build(op, Path(tmp), spec)
            yield Path(tmp) / "bin" / "python"
        return
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(op.venv_cache_path) / f"beatflow-venv-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"beatflow-venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / _DONE).is_file():
            _build(op, folder, spec)
    yield folder / "bin" / "python"


class PythonVirtualenvOperator(ExternalPythonOperator):
    """``PythonVirtualenvOperator(python_callable=..., requirements=[...], venv_cache_path=...,
    system_site_packages=..., python_version=..., pip_install_options=..., index_urls=...)``."""

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        requirements: str | Sequence[str] | None = None,
        python_version: str | None = None,
        system_site_packages: bool = True,
        pip_install_options: Sequence[str] | None = None,
        index_urls: str | Sequence[str] | None = None,
        venv_cache_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(python=None, python_callable=python_callable, **kwargs)
        if isinstance(requirements, str):  # a requirements file's text
            requirements = [r.strip() for r in requirements.splitlines()]
        self.requirements = [r for r in requirements or () if r and not r.startswith("#")]
        self.python_version = None if python_version is None else str(python_version)
        self.system_site_packages = system_site_packages
        self.pip_install_options = list(pip_install_options or ())
        self.index_urls = [index_urls] if isinstance(index_urls, str) else list(index_urls or ())
        self.venv_cache_path = venv_cache_path

    def execute(self, context: Mapping[str, Any]) -> Any:
        with environment(self) as python:
            return run_external(self, str(python), context)


class BranchPythonVirtualenvOperator(PythonVirtualenvOperator):
    """``BranchPythonVirtualenvOperator``: the callable, run in its environment, returns the task
    id(s) to follow."""

    control = BRANCH


class VirtualenvDecoratedOperator(PythonVirtualenvOperator):
    """``@task.virtualenv(requirements=[...])``."""

    expand_into = "op_kwargs"


class BranchVirtualenvDecoratedOperator(BranchPythonVirtualenvOperator):
    """``@task.branch_virtualenv(requirements=[...])``."""

    expand_into = "op_kwargs"
