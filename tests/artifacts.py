"""What a test run keeps for people to look at afterwards (the browser tests' screenshots): files
under BEATFLOW_TEST_ARTIFACTS, by default .ci/artifacts/ in the checkout (git-ignored). CI keeps
that folder (`.ci/run` empties it first and says what it holds at the end)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
ENV = "BEATFLOW_TEST_ARTIFACTS"


def artifacts_dir() -> Path:
    """The folder a test run keeps its artifacts in (relative names: from the checkout)."""
    given = os.environ.get(ENV, "").strip()
    folder = Path(given) if given else CHECKOUT / ".ci" / "artifacts"
    return folder if folder.is_absolute() else CHECKOUT / folder


def keep(path: Path, kind: str = "screenshots") -> Path:
    """Copy ``path`` into the artifacts folder's ``kind`` subfolder; returns the copy."""
    folder = artifacts_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(path, folder / path.name))
