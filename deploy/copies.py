"""Derived copies of a one-source file (kustomize and Helm refuse files outside their roots):
the ``Copy`` record and the check and rewrite every sync module shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Copy:
    """A file derived from ``source`` (relative to the repo root), and the text it must hold."""

    source: Path
    path: Path
    text: str

    def is_stale(self) -> bool:
        return not self.path.exists() or self.path.read_text(encoding="utf-8") != self.text


def stale(copies: Iterable[Copy]) -> list[Copy]:
    """The copies whose file is missing or differs from the text its source produces."""
    return [c for c in copies if c.is_stale()]


def write(copies: Iterable[Copy]) -> list[Path]:
    """Rewrite the stale copies; return the paths written."""
    written = []
    for c in stale(copies):
        c.path.parent.mkdir(parents=True, exist_ok=True)
        c.path.write_text(c.text, encoding="utf-8")
        written.append(c.path)
    return written
