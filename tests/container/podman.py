"""Podman for the container tests: the image built by deploy/image.sh (cached base and wheels), and
containers run the way the issue's machines allow (runc, lowered rlimits, the host's network so
127.0.0.1 reaches the test Redis and PostgreSQL), each labelled so the run removes what it made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests import procs, services
from tests.http_get import http_get as http_get  # the container tests' GET

IMAGE = os.environ.get("BEATFLOW_TEST_IMAGE", "localhost/beatflow:test")
LABEL = f"beatflow-test={uuid.uuid4().hex[:10]}"
RUN_FLAGS = os.environ.get(
    "BEATFLOW_PODMAN_FLAGS", "--ulimit nofile=1024:1024 --ulimit nproc=1000:1000"
).split()


# A DAG the beats fire every 2 seconds: a standby's first fire after a failover shows at once.
TICKS_DAG = """
from datetime import timedelta

from beatflow import DAG, task


@task
def tick() -> int:
    return 1


with DAG("ctr_ticks", schedule=timedelta(seconds=2), catchup=False, max_active_runs=10000):
    tick()
"""


def dags_folder(parent: Path) -> Path:
    """``parent``/dags with TICKS_DAG and the shipped example_fan_out.py, readable by the
    containers' uid 10001 (they mount it read-only)."""
    dags = parent / "dags"
    dags.mkdir()
    (dags / "ctr_ticks.py").write_text(TICKS_DAG)
    shutil.copy(procs.ROOT / "dags" / "example_fan_out.py", dags)
    for path in (dags, *dags.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dags


def available() -> str | None:
    """None when Podman can be used here, else why not."""
    if shutil.which("podman") is None:
        return "podman is not installed (make deps-system as root installs it)"
    return None


def podman() -> list[str]:
    # Debian's crun refuses hosts whose cgroups are in hybrid mode; runc runs there.
    runtime = os.environ.get("BEATFLOW_PODMAN_RUNTIME") or shutil.which("runc")
    return ["podman", *(["--runtime", runtime] if runtime else [])]


def run(
    args: Iterable[str], timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    argv = [*podman(), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def build_image(run: str | None = None) -> tuple[str, float] | None:
    """Build the image with deploy/image.sh; return its tag and how long the build took. With
    ``run`` (the xdist run's id): None, without building, when another process of the run has
    built it already (deploy/image.sh would take its cached ~35 s again)."""
    started = time.monotonic()
    built = services.STATE_DIR / f"image-built-{run}"
    env = {
        **os.environ,
        "BEATFLOW_IMAGE": IMAGE,
        "BEATFLOW_SERVICE_IMAGES": "1",  # Redis and PostgreSQL for test_compose_stack
        "PYTHON": str(procs.ROOT / ".venv" / "bin" / "python"),
    }
    with services.source_build_lock():  # its wheel is built from the source tree
        if run is not None and built.exists():
            return None
        done = subprocess.run(
            ["bash", str(procs.ROOT / "deploy" / "image.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
        )
        if done.returncode != 0:
            raise AssertionError(f"deploy/image.sh failed:\n{done.stderr[-5000:]}")
        if run is not None:
            for old in services.STATE_DIR.glob("image-built-*"):  # earlier runs'
                old.unlink(missing_ok=True)
            built.write_text(IMAGE)
    return IMAGE, time.monotonic() - started


@dataclass
class Container:
    name: str
    cid: str

    def exec(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run(["exec", self.cid, *argv], timeout=timeout, check=False)

    def healthcheck(self) -> subprocess.CompletedProcess[str]:
        """Run the image's HEALTHCHECK command now (`podman healthcheck run`)."""
        return run(["healthcheck", "run", self.cid], timeout=60, check=False)

    def logs(self, tail: int = 60) -> str:
        done = run(["logs", "--tail", str(tail), self.cid], check=False)
        return done.stdout + done.stderr

    def is_running(self) -> bool:
        done = run(["inspect", "--format", "{{.State.Running}}", self.cid], check=False)
        return done.stdout.strip() == "true"

    def inspect(self, template: str) -> str:
        return run(["inspect", "--format", template, self.cid]).stdout.strip()

    def kill(self) -> None:
        run(["kill", "--signal", "KILL", self.cid], check=False)


@dataclass
class Stack:
    """Containers of one test, removed together."""

    image: str
    env: dict[str, str]
    containers: list[Container] = field(default_factory=list)

    def _flags(self, name: str, env: Mapping[str, str], volumes: Iterable[str]) -> list[str]:
        flags = [
            "--label",
            LABEL,
            "--name",
            f"bf-{name}-{uuid.uuid4().hex[:6]}",
            "--hostname",
            name,
            "--network",
            "host",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            *RUN_FLAGS,
        ]
        for key, value in {**self.env, **env}.items():
            flags += ["--env", f"{key}={value}"]
        for volume in volumes:
            flags += ["--volume", volume]
        return flags

    def start(
        self,
        name: str,
        command: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        volumes: Iterable[str] = (),
    ) -> Container:
        flags = self._flags(name, env or {}, volumes)
        cid = run(["run", "--detach", *flags, self.image, *command]).stdout.strip().splitlines()[-1]
        container = Container(name, cid)
        self.containers.append(container)
        return container

    def once(
        self,
        name: str,
        command: Iterable[str],
        env: Mapping[str, str] | None = None,
        volumes: Iterable[str] = (),
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run a one-off container to completion (a migration, a CLI call)."""
        flags = self._flags(name, env or {}, volumes)
        return run(["run", "--rm", *flags, self.image, *command], timeout=timeout, check=False)

    def wait_healthy(self, container: Container, timeout: float = 120) -> str:
        last: list[str] = [""]

        def healthy() -> bool:
            if not container.is_running():
                raise AssertionError(f"{container.name} exited:\n{container.logs()}")
            done = container.healthcheck()
            last[0] = done.stdout + done.stderr
            return done.returncode == 0

        try:
            procs.wait_for(
                healthy, timeout=timeout, interval=1.0, message=f"{container.name} healthy"
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: {last[0]}\n{container.logs()}") from None
        return last[0]

    def remove(self) -> None:
        ids = [c.cid for c in self.containers]
        if ids:
            run(["rm", "--force", "--time", "2", *ids], timeout=120, check=False)
        self.containers.clear()


def remove_labelled() -> None:
    """Remove every container this test run labelled (also what a failed test left)."""
    done = run(["ps", "--all", "--quiet", "--filter", f"label={LABEL}"], check=False)
    ids = done.stdout.split()
    if ids:
        run(["rm", "--force", "--time", "2", *ids], timeout=120, check=False)


def podman_compose() -> str:
    found = Path(sys.executable).with_name("podman-compose")
    return str(found) if found.exists() else (shutil.which("podman-compose") or "podman-compose")


@dataclass
class Compose:
    """A podman-compose project of one test: its compose files and environment."""

    project: str
    env: dict[str, str]
    files: list[str]

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        argv = [podman_compose(), "-p", self.project]
        runtime = " ".join(podman()[1:])
        if runtime:
            argv.append(f"--podman-args={runtime}")
        for path in self.files:
            argv += ["-f", path]
        return subprocess.run(
            [*argv, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def container(self, service: str) -> Container:
        return Container(service, f"{self.project}_{service}_1")

    def down(self, *flags: str) -> None:
        """``compose down`` with ``flags``, then remove any container of the project it left."""
        self.compose("down", *flags, "-t", "2", timeout=180)
        leftover = run(
            ["ps", "-aq", "--filter", f"label=io.podman.compose.project={self.project}"],
            check=False,
        ).stdout.split()
        if leftover:
            run(["rm", "-f", "-t", "2", *leftover], check=False)
