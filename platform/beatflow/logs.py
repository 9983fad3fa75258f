"""configure_logging(settings): one call per process; JSON lines in containers, text on a terminal.
Lines logged inside a task run carry its correlation ids (dag_id, run_id, task_id, try_number,
celery_task_id)."""

from __future__ import annotations

import ast
import contextvars
import json
import logging
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from beatflow.settings import Settings

_NO_IDS: Mapping[str, Any] = MappingProxyType({})
_CORRELATION: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "beatflow_correlation", default=_NO_IDS
)
CORRELATION_FIELDS = ("dag_id", "run_id", "task_id", "try_number", "celery_task_id")
_configured = False


def current_correlation() -> Mapping[str, Any]:
    """The correlation ids of the running task run (empty outside one)."""
    return _CORRELATION.get()


@contextmanager
def correlation(**ids: Any) -> Iterator[None]:
    """Attach ``ids`` to every log line emitted inside the block."""
    token = _CORRELATION.set({**_CORRELATION.get(), **ids})
    try:
        yield
    finally:
        _CORRELATION.reset(token)


_PAYLOAD_MARKERS = ("\n\nbody:", "The full contents of the message body was")


class _PayloadFilter(logging.Filter):
    """Celery's consumer logs the body of a message it refuses (wrong content type, unknown
    task); beatflow never logs payloads: keep what happened, drop the body."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("celery.worker"):
            message = record.getMessage()
            for marker in _PAYLOAD_MARKERS:
                if marker in message:
                    record.msg = message.split(marker)[0].rstrip() + " [message body not logged]"
                    record.args = None
                    break
        return True


class _CorrelationFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _CORRELATION.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        data = getattr(record, "data", None)
        if isinstance(data, dict):
            _from_celery(record, data)
        return True


# Celery's builtin tasks of ours whose first two arguments are (dag_id, run_id)
_BUILTIN_WITH_RUN = ("beatflow.finish_run", "beatflow.segment")


def _from_celery(record: logging.LogRecord, data: dict[str, Any]) -> None:
    """Celery's own task lines (received, succeeded, failed, retry) pass the task's id, name and
    argument repr as ``extra={"data": ...}``: turn them into the correlation ids (a DAG task is
    named ``<dag_id>.<task_id>`` and takes the run id first) and drop the payload reprs."""
    record.data = {k: v for k, v in data.items() if k in ("runtime", "eta")} or None
    task_id, name = data.get("id"), data.get("name")
    if not isinstance(task_id, str) or not isinstance(name, str):
        return
    args = _literal(data.get("args"))
    ids: dict[str, Any] = {"celery_task_id": task_id}
    if name in _BUILTIN_WITH_RUN and len(args) >= 2:
        ids.update(dag_id=args[0], run_id=args[1])
    elif not name.startswith(("beatflow.", "celery.")) and "." in name:
        dag_id, _, task = name.partition(".")
        ids.update(dag_id=dag_id, task_id=task)
        if args and isinstance(args[0], str):
            ids["run_id"] = args[0]
    for key, value in ids.items():
        if not hasattr(record, key):
            setattr(record, key, value)


# the leading string arguments of an argument repr, "('etl', 'r-7', ...)": what _from_celery reads
_LEADING_STRINGS = re.compile(r"[(\[]'([^'\\]*)'(?:, '([^'\\]*)')?(?=[,)\]])")


def _literal(text: Any) -> tuple[Any, ...]:
    """The arguments of Celery's repr of them, as far as ``_from_celery`` reads them: the leading
    strings, found without a parse (a log line of every task run pays for this); anything else
    (a first argument that is not a plain string) through ``ast.literal_eval``."""
    if isinstance(text, tuple | list):
        return tuple(text)
    if not isinstance(text, str) or len(text) > 2000:
        return ()
    lead = _LEADING_STRINGS.match(text)
    if lead is not None:
        first, second = lead.groups()
        return (first,) if second is None else (first, second)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ()
    return tuple(value) if isinstance(value, tuple | list) else ()


_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


_PLAIN = (str, int, float, bool, dict, type(None))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, correlation ids, extras."""

    _second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text

    def _timestamp(self, created: float, msecs: float) -> str:
        second = int(created)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        return f"{self._second[1]}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self._timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key in _STANDARD or key.startswith("_") or (key == "data" and value is None):
                continue
            out[key] = value if isinstance(value, _PLAIN) else str(value)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """Readable lines with the correlation ids appended as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        ids = " ".join(
            f"{k}={getattr(record, k)}" for k in CORRELATION_FIELDS if hasattr(record, k)
        )
        return f"{base} [{ids}]" if ids else base


def configure_logging(settings: Settings, *, stream: Any = None, force: bool = False) -> None:
    """Install beatflow's handler on the root logger (once per process unless ``force``)."""
    global _configured
    if _configured and not force:
        return
    stream = stream or sys.stderr
    fmt = settings.log_format
    if fmt == "auto":
        fmt = "text" if getattr(stream, "isatty", lambda: False)() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_PayloadFilter())
    handler.addFilter(_CorrelationFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    # Alembic narrates every migration check at INFO; keep it for real problems.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, root.level))
    _configured = True
