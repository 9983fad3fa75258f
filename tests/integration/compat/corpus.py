"""Airflow's own example DAGs, fetched at test time: the two wheels (pinned versions and sha256)
from the package index into a cache folder, their ``example_dags/`` DAG files copied flat into a
dags folder. Nothing of Airflow is committed: only the names, versions and digests below."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

WHEELS = {
    "apache_airflow_core-3.3.2-py3-none-any.whl": (
        "apache-airflow-core==3.3.2",
        "99258922bccec15be4700ff89f3c942b8acd93407e263c287ce863e671bb3c50",
        "airflow/example_dags/",
    ),
    "apache_airflow_providers_standard-1.21.0-py3-none-any.whl": (
        "apache-airflow-providers-standard==1.21.0",
        "12969f10b7735f46dfa1d4f48675ca19dce46bbaa3a68d42c0fdb94eca4cff25",
        "airflow/providers/standard/example_dags/",
    ),
}
CACHE = Path(
    os.environ.get("BEATFLOW_AIRFLOW_WHEELS", Path(tempfile.gettempdir()) / "beatflow-airflow")
)


class Unreachable(Exception):
    """The package index could not be reached (the test skips, saying why)."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheels() -> list[Path]:
    """The two wheels in the cache, downloaded when missing; each checked against its sha256."""
    CACHE.mkdir(parents=True, exist_ok=True)
    missing = [req for name, (req, _, _) in WHEELS.items() if not (CACHE / name).is_file()]
    if missing:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            + ["--disable-pip-version-check", "--timeout", "20", "-d", str(CACHE), *missing],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise Unreachable(f"pip download {' '.join(missing)} failed: {done.stderr[-500:]}")
    out = []
    for name, (_, digest, _) in WHEELS.items():
        path = CACHE / name
        got = _sha256(path)
        if got != digest:
            path.unlink()
            raise AssertionError(f"{name}: sha256 {got}, pinned {digest} (removed from the cache)")
        out.append(path)
    return out


def extract(folder: Path) -> list[str]:
    """Copy every example DAG file (not libs/ or plugins/, not __init__) into ``folder``; the
    file names, sorted."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for path in wheels():
        prefix = WHEELS[path.name][2]
        with zipfile.ZipFile(path) as wheel:
            for member in wheel.namelist():
                rest = member.removeprefix(prefix)
                if member.startswith(prefix) and "/" not in rest and rest.endswith(".py"):
                    if rest == "__init__.py":
                        continue
                    (folder / rest).write_bytes(wheel.read(member))
                    names.append(rest)
    return sorted(names)


@dataclass
class Row:
    file: str
    outcome: str  # ran | failed | out of scope
    why: str = ""


def table(rows: list[Row]) -> str:
    width = max(len(r.file) for r in rows)
    lines = [f"{'file':<{width}}  outcome       why", "-" * (width + 40)]
    lines += [f"{r.file:<{width}}  {r.outcome:<12}  {r.why}" for r in rows]
    ran = sum(r.outcome == "ran" for r in rows)
    lines.append(f"ran {ran} of {len(rows)} files ({100 * ran / len(rows):.0f} %)")
    return "\n".join(lines)
