"""The RabbitMQ node a chaos run owns (``beatflow chaos --broker rabbitmq``): a node of its own
name on free ports (AMQP and Erlang distribution) with its database, logs and Erlang cookie
under the run's work folder, never the machine's node; killed, restarted and put under a memory
alarm on purpose by the faults (``faults_rabbitmq.py``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from beatflow.chaos.servers import free_port, wait_port
from beatflow.errors import ChaosSetupError

# The Debian package's wrappers switch to the rabbitmq user and its /var/lib/rabbitmq; the
# scripts under /usr/lib/rabbitmq/bin run as the caller, with the environment given here.
SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin", "/usr/local/lib/rabbitmq/bin")
MEMORY_WATERMARK = "0.4"  # RabbitMQ's default vm_memory_high_watermark


def _script(name: str) -> str:
    for folder in SCRIPT_DIRS:
        path = Path(folder) / name
        if path.exists():
            return str(path)
    found = shutil.which(name)
    if found is None:
        raise ChaosSetupError(f"{name} not found: apt-get install rabbitmq-server")
    return found


@dataclass
class ChaosRabbitMQ:
    """A single RabbitMQ node (no plugins) kept across restarts: durable queues and persistent
    messages survive a kill, as on a real node's disk."""

    workdir: Path
    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def node(self) -> str:
        return f"beatflow-chaos-{self.port}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        d = self.workdir
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")},
            "HOME": str(d),  # the Erlang cookie: the node's and rabbitmqctl's
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(d / "node.pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
        }

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "enabled_plugins").write_text("[].\n")
        log = open(self.workdir / "node.log", "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            [_script("rabbitmq-server")],
            env=self.env(),
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: beam, epmd children, shells
        )
        log.close()
        wait_port(self.port, 90, f"RabbitMQ node {self.node}")
        self.ctl("await_startup", "--timeout", "60")

    def kill(self) -> None:
        """SIGKILL the node (the whole process group: the shell, beam and its helpers)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)
        self.process = None

    def stop(self) -> None:
        """A clean shutdown (``rabbitmqctl stop``), SIGKILL if it does not end."""
        if self.process is not None and self.process.poll() is None:
            try:
                self.ctl("stop", timeout=60)
                self.process.wait(timeout=60)
            except (ChaosSetupError, subprocess.TimeoutExpired):
                self.kill()
        self.process = None

    def restart(self, *, kill: bool) -> None:
        self.kill() if kill else self.stop()
        self.start()

    def memory_alarm(self, on: bool) -> None:
        """Raise (watermark 0: every publishing connection blocks) or clear the memory alarm."""
        self.ctl("set_vm_memory_high_watermark", "0" if on else MEMORY_WATERMARK)

    def ctl(self, *args: str, timeout: float = 90) -> str:
        result = subprocess.run(
            [_script("rabbitmqctl"), "-n", self.node, *args],
            env=self.env(),
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise ChaosSetupError(f"rabbitmqctl {' '.join(args)}: {result.stdout}{result.stderr}")
        return result.stdout
