"""The docs site builds with warnings as errors (`mkdocs build --strict`, what `make docs` runs),
and its reference pages come from the code: every setting, CLI command, metric, layer and alert."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "gen"))
import reference  # noqa: E402  (docs/gen/reference.py)


def require_mkdocs() -> None:
    if importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"):
        return
    message = "mkdocs-material is not installed: pip install -e '.[docs]' (the test extra has it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)  # CI must build the docs, never skip them
    pytest.skip(message)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "platform")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_docs_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    require_mkdocs()
    result = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    settings = (site / "reference" / "settings" / "index.html").read_text()
    for variable in reference.setting_variables():
        assert variable in settings
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for path, _, _ in reference.cli_commands():
        assert " ".join(path) in cli
    metrics = (site / "reference" / "metrics" / "index.html").read_text()
    for name, *_ in reference.metric_rows():
        assert name in metrics
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "/api/v1/dags/{dag_id}/runs" in api
    layers = (site / "architecture" / "layers" / "index.html").read_text()
    for layer in reference.layers():
        for package in layer:
            assert package in layers


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    # The same site with one link to a page that does not exist: --strict must refuse it.
    require_mkdocs()
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    for shared in ("platform", "tests", "bench"):  # what the generators read
        (tmp_path / shared).symlink_to(ROOT / shared)
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](how-to/no-such-page.md)\n")
    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_every_shipped_alert_needs_its_runbook() -> None:
    runbooks = (ROOT / "docs" / "operations" / "runbooks.md").read_text()
    reference.check_runbooks(runbooks)
    first = reference.alert_names()[0]
    with pytest.raises(reference.DocsError, match=first):
        reference.check_runbooks(runbooks.replace(f"## {first}\n", "## Renamed\n"))


def test_every_setting_needs_its_meaning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference.settings_page()
    meanings = yaml.safe_load((ROOT / "docs" / "gen" / "settings.yml").read_text())
    variable = next(iter(reference.setting_variables()))
    gen = tmp_path / "gen"
    shutil.copytree(ROOT / "docs" / "gen", gen)
    del meanings[variable]
    (gen / "settings.yml").write_text(yaml.safe_dump(meanings))
    monkeypatch.setattr(reference, "GEN", gen)
    with pytest.raises(reference.DocsError, match=variable):
        reference.settings_page()
