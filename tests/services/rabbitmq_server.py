"""RabbitMQ for tests: the machine's node on 127.0.0.1:5672 (guest/guest) under a vhost of this
test session's own, or a throwaway node of our own (``rabbitmq-server`` on free ports, its
files in a temp folder), which a test may stop, kill and start again on the same ports."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tests.services._base import (
    OWNED,
    OwnedServer,
    ServiceError,
    drop_record,
    free_port,
    reap_orphans,
    wait_until,
)

SHARED_PORT = 5672
# the Debian wrapper in /usr/sbin switches to the rabbitmq user (and drops our RABBITMQ_*
# variables' meaning for its files); the scripts it wraps run as whoever calls them
_SCRIPTS = Path("/usr/lib/rabbitmq/bin")


def rabbitmq_script(name: str) -> str:
    """``rabbitmq-server`` or ``rabbitmqctl``; ServiceError says how to install them."""
    direct = _SCRIPTS / name
    if direct.exists():
        return str(direct)
    found = shutil.which(name)
    if found:
        return found
    raise ServiceError(f"no {name}: install RabbitMQ (apt-get install rabbitmq-server)")


def amqp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something speaks AMQP at host:port (it answers the protocol header)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            return sock.recv(8).startswith(b"\x01\x00\x00")  # connection.start
    except OSError:
        return False


def _ctl(
    node: str | None, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> str:
    """rabbitmqctl on ``node`` (None: the machine's own node, through the command on PATH,
    which on Debian runs as the rabbitmq user and so has that node's Erlang cookie)."""
    target = ["-n", node] if node else []
    command = rabbitmq_script("rabbitmqctl") if node else shutil.which("rabbitmqctl")
    if command is None:
        raise ServiceError("no rabbitmqctl on PATH")
    done = subprocess.run(
        [command, *target, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise ServiceError(f"rabbitmqctl {' '.join(args)}: {done.stdout}{done.stderr}".strip())
    return done.stdout


@dataclass
class OwnedRabbit(OwnedServer):
    """A RabbitMQ node this process started and may stop, kill and start again (same ports,
    same files: its durable queues and persistent messages survive a restart)."""

    port: int
    dist_port: int
    workdir: Path
    name: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    start_timeout: ClassVar[float] = 90.0

    @property
    def node(self) -> str:
        return f"{self.name}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    @property
    def env(self) -> dict[str, str]:
        w = self.workdir
        return {
            **os.environ,
            "HOME": str(w),  # its Erlang cookie, shared with our rabbitmqctl calls
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(w / "mnesia"),
            "RABBITMQ_LOG_BASE": str(w / "log"),
            "RABBITMQ_CONFIG_FILE": str(w / "rabbitmq"),  # rabbitmq.conf
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
        }

    def ctl(self, *args: str) -> str:
        return _ctl(self.node, *args, env=self.env)

    def command(self) -> list[str]:
        return [rabbitmq_script("rabbitmq-server")]

    def command_env(self) -> dict[str, str]:
        return self.env

    def command_cwd(self) -> Path:
        return self.workdir

    def answers(self) -> bool:
        return amqp_answers("127.0.0.1", self.port)

    def describe(self) -> str:
        return f"RabbitMQ node {self.node} on port {self.port}"

    def stop(self) -> None:
        """A clean shutdown (``rabbitmqctl stop``), as a restart by an operator does."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.ctl("stop")
        except (ServiceError, subprocess.TimeoutExpired):
            self.process.terminate()
        self._wait()

    def kill(self) -> None:
        """SIGKILL of the node's process group: a crash."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._wait()

    def _wait(self) -> None:
        assert self.process is not None
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        # the node (beam) may outlive its start script for a moment: wait for the port to close
        wait_until(lambda: not amqp_answers("127.0.0.1", self.port), 30, "the node to stop")
        drop_record(self.name)


def start_rabbitmq_server() -> OwnedRabbit:
    """Start a throwaway RabbitMQ node on free ports; stopped at session end."""
    rabbitmq_script("rabbitmq-server")
    reap_orphans()
    workdir = Path(tempfile.mkdtemp(prefix="beatflow-rabbitmq-"))
    (workdir / "mnesia").mkdir()
    (workdir / "log").mkdir()
    (workdir / "enabled_plugins").write_text("[].\n")
    # guest may connect from anywhere but localhost only by default; we connect to 127.0.0.1
    (workdir / "rabbitmq.conf").write_text("loopback_users = none\n")
    server = OwnedRabbit(
        port=free_port(),
        dist_port=free_port(),
        workdir=workdir,
        name=f"bf{uuid.uuid4().hex[:10]}",
    )
    OWNED.append(server)
    server.start()
    return server


@dataclass
class RabbitServer:
    """A RabbitMQ to test on: ``url`` is a vhost of this test session's own."""

    url: str
    description: str = ""
    vhost: str = ""
    _owned: OwnedRabbit | None = None

    @property
    def is_throwaway(self) -> bool:
        return self._owned is not None

    def queues(self) -> dict[str, dict[str, Any]]:
        """The queues of this vhost by name: ``durable``, ``type``, ``arguments``, ``messages``."""
        args = ("list_queues", "-p", self.vhost or "/", "--formatter", "json")
        columns = ("name", "durable", "type", "arguments", "messages")
        if self._owned is not None:
            out = self._owned.ctl(*args, *columns)
        else:
            out = _ctl(None, *args, *columns)
        queues = {q["name"]: q for q in json.loads(out[out.index("[") :])}
        for q in queues.values():  # [[name, type, value], ...] as {name: value}
            q["arguments"] = {a[0]: a[-1] for a in q["arguments"]}
        return queues

    def stop(self) -> None:
        if self._owned is not None:
            self._owned.close()
        elif self.vhost:
            # at worst the shared node keeps an empty vhost
            with contextlib.suppress(ServiceError, subprocess.TimeoutExpired, OSError):
                _ctl(None, "delete_vhost", self.vhost)


def ensure_rabbitmq(*, throwaway: bool) -> RabbitServer:
    """The machine's RabbitMQ on 127.0.0.1:5672 (guest/guest) under a new vhost (or, when
    rabbitmqctl cannot add one, the default vhost), else a throwaway node (``throwaway``:
    straight to it)."""
    if not throwaway and amqp_answers("127.0.0.1", SHARED_PORT):
        vhost = f"beatflow-test-{uuid.uuid4().hex[:10]}"
        try:
            _ctl(None, "add_vhost", vhost)
            _ctl(None, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        except (ServiceError, subprocess.TimeoutExpired, OSError) as exc:
            url = f"amqp://guest:guest@127.0.0.1:{SHARED_PORT}//"
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return RabbitServer(url=url, description=f"running node, vhost / ({why})")
        url = f"amqp://guest:guest@127.0.0.1:{SHARED_PORT}/{vhost}"
        return RabbitServer(url=url, description=f"running node, vhost {vhost}", vhost=vhost)
    owned = start_rabbitmq_server()
    return RabbitServer(
        url=owned.url, description=f"throwaway node {owned.node} on {owned.port}", _owned=owned
    )
