"""Count calls across worker processes by appending to marker files (test helper, not a DAG)."""

import os
from pathlib import Path

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))


def mark(name: str) -> int:
    MARKS.mkdir(parents=True, exist_ok=True)
    path = MARKS / name
    with open(path, "a") as f:
        f.write("x")
    return len(path.read_text())


def count(name: str) -> int:
    path = MARKS / name
    return len(path.read_text()) if path.exists() else 0
