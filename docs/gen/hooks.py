"""mkdocs hooks: add the pages generated from the code (docs/gen/reference.py) to the site and
check that every shipped alert has its runbook. A failure stops the build."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference
from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    for src_uri, make in reference.PAGES.items():
        files.append(File.generated(config, src_uri, content=make()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri == "operations/runbooks.md":
        reference.check_runbooks(markdown)
    return markdown
