"""The Dockerfile's structure: two stages on one base (python:3.11-slim by default, a Debian base
made by deploy/image.sh without a registry), wheels installed from the host-built wheelhouse
without an index, nothing of it in the final stage, a non-root uid 10001, a health check through
`beatflow health`, a default command that runs, and a .dockerignore that keeps the context to
what the image needs. tests/container/ builds and runs it for real."""

from __future__ import annotations

import re
import tomllib

from tests.deploy.manifests import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _stages() -> list[tuple[str, str]]:
    """(stage name, body) for each FROM ... AS name."""
    parts = re.split(r"^FROM\s+", DOCKERFILE, flags=re.M)[1:]
    return [(re.match(r"\S+\s+AS\s+(\S+)", p, re.I).group(1), p) for p in parts]  # type: ignore[union-attr]


def test_the_image_builds_in_two_stages_from_python_slim() -> None:
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", DOCKERFILE, re.M)
    assert [name for name, _ in _stages()] == ["build", "runtime"]
    assert all(body.startswith("${PYTHON_IMAGE}") for _, body in _stages())


def test_the_build_installs_the_wheelhouse_without_an_index() -> None:
    build, runtime = (body for _, body in _stages())
    installs = re.findall(r"pip install ([^\n\\]*)", build)
    assert installs and all("--no-index" in line for line in installs)
    assert "PIP_NO_INDEX=1" in build
    for word in ("build-essential", "gcc", "apt-get install", "pip install", "wheels"):
        assert word not in runtime, f"final stage runs {word!r}"
    assert "COPY --from=build /opt/beatflow /opt/beatflow" in runtime


def test_the_image_installs_the_extras_of_every_process_it_runs() -> None:
    """One image runs every process: beatflow web (the web extra), Flower (flower) and the
    workers against PostgreSQL (postgres); deploy/image.sh puts their wheels in the wheelhouse."""
    build = _stages()[0][1]
    assert re.search(r"pip install [^\n]*--no-index[^\n]*\\\n\s*'beatflow\[all\]'", build), build
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras["all"] == ["beatflow[web,postgres,flower]"]
    assert 'expand("all")' in (ROOT / "deploy" / "image.sh").read_text()


def test_the_default_command_runs_a_worker_not_help() -> None:
    cmd = re.findall(r"^CMD (\[.*\])$", DOCKERFILE, re.M)
    assert cmd == ['["celery", "-A", "beatflow", "worker", "-l", "info", "-E"]']


def test_the_final_stage_runs_as_uid_10001() -> None:
    runtime = _stages()[-1][1]
    assert "useradd --system --uid 10001" in runtime
    users = re.findall(r"^USER\s+(\S+)", runtime, re.M)
    assert users == ["10001:10001"]
    assert runtime.index("USER") < runtime.index("HEALTHCHECK")


def test_the_health_check_uses_the_cheap_local_probe() -> None:
    check = re.search(r"^HEALTHCHECK .*?CMD (\[.*?\])$", DOCKERFILE, re.M | re.S)
    assert check is not None
    assert check.group(1).startswith('["beatflow", "health"')


def test_the_build_context_holds_only_what_the_image_needs() -> None:
    lines = [
        ln
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "platform", "dags", ".wheelhouse"}
    copied = set(re.findall(r"^COPY (?:--\S+ )*(\S+)", DOCKERFILE, re.M)) - {"/opt/beatflow"}
    assert {c.rstrip("/").split("/")[0] for c in copied} <= allowed
