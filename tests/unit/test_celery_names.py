"""`beatflow dags check` refuses DAG/task ids whose Celery task names (<dag>.<task>) clash with
beatflow's built-in tasks or with a plain task from BEATFLOW_IMPORTS, and prints each load error
once."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from click.testing import CliRunner

from beatflow.cli import main
from beatflow.dag.loader import load_dags


def _check(folder: Path, **env: str) -> tuple[int, str]:
    full = {
        "BEATFLOW_DAGS_FOLDER": str(folder),
        "BEATFLOW_DATABASE_URL": f"sqlite:///{folder / 'bf.db'}",
        **env,
    }
    result = CliRunner().invoke(main, ["dags", "check"], env=full)
    return result.exit_code, result.output


def test_a_dag_named_beatflow_cannot_shadow_the_builtin_segment_task(tmp_path: Path) -> None:
    (tmp_path / "shadow.py").write_text(
        "from beatflow import DAG, task\n\n"
        "@task\ndef segment(): ...\n\n"
        'with DAG("beatflow"):\n    segment()\n'
    )
    bag = load_dags(tmp_path)
    assert "beatflow" not in bag.dags
    code, out = _check(tmp_path)
    assert code == 1
    assert 'DAG id "beatflow" is reserved' in out
    assert "shadow.py:6" in out


def test_a_dag_task_cannot_take_a_plain_tasks_name(tmp_path: Path) -> None:
    module = f"ledger_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from celery import shared_task\n\n@shared_task\ndef post(x):\n    return x\n"
    )
    (tmp_path / "ledger_dag.py").write_text(
        "from beatflow import DAG, task\n\n"
        "@task\ndef post(): ...\n\n"
        f'with DAG("{module}"):\n    post()\n\n'
        'with DAG("fine"):\n    post()\n'
    )
    code, out = _check(tmp_path, BEATFLOW_IMPORTS=module)
    assert code == 1, out
    assert f'plain Celery task from BEATFLOW_IMPORTS is already named "{module}.post"' in out
    assert "1 DAGs loaded, 1 broken" in out  # "fine" still loads


def test_dags_check_prints_each_error_once(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        'from beatflow import DAG, task\n\n@task\ndef a(): ...\n\nwith DAG("bad_one"):\n'
        "    a() >> b()\n"
    )
    # a real process: the loader's log lines reach stderr there as they do for users
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")},
        "BEATFLOW_DAGS_FOLDER": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from beatflow.cli import main; sys.exit(main())",
            "dags",
            "check",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert (done.stdout + done.stderr).count("NameError: name 'b' is not defined") == 1
