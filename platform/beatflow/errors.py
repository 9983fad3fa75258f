"""The exception tree: every error beatflow raises on purpose derives from BeatflowError.

BeatflowError
├── SettingsError            bad BEATFLOW_* values (all of them, at once)
├── AppConfigError           a Celery app given to init_app has settings beatflow cannot run with
├── DagError                 a DAG definition is wrong
│   └── DagDefinitionError   cycle, unknown dependency, duplicate id, bad schedule
├── DagNotFoundError         no DAG with that id is loaded
├── ConfError                a trigger's conf does not match the DAG's params
├── JsonLimitError           JSON input over the size or nesting limit (also a ValueError)
├── InvalidIdError           a DAG, task or run id outside the safe character set or length
├── RunNotFoundError         no DAG run with that DAG id and run id
├── DeadLetterNotFoundError  no dead letter with that id
├── DeadLetterStaleError     a dead letter closed as stale (its run marked, a newer letter)
├── RunStateError            an operator's verb does not apply to the run's current state
├── UnknownTaskError         an operator named a task the DAG does not have
├── TaskValueError           task_value: no DAG task run has that Celery task id, or it failed
├── BrokerUnavailableError   a DAG run could not be sent: the broker is unreachable
├── StoreError               the results database failed or refused
│   ├── StoreUnavailableError  the database cannot be reached (retry later)
│   ├── SchemaOutOfDateError   the database is behind the code: run `beatflow db upgrade`
│   └── ResultError            a task's return value is not JSON or is too large
├── TaskRunFailedError       a task run failed for good without an exception of its own
├── DeploySkewError          a message names a DAG, task or plan part this worker does not have
├── NoSuchItemError          a .map() instance's index is past the end of the list it maps over
├── DedupeKeyError           a plain Idempotent task's dedupe_key template cannot be filled
├── SchedulerError           the beat cannot run with these settings
│   └── StaleLeaderError       a deposed beat leader's write was refused
├── DevStackError            `beatflow dev` cannot start its Redis or a child process
├── ChaosSetupError          `beatflow chaos` cannot start a server it needs
└── MissingExtraError        an optional part needs an extra that is not installed
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence


class BeatflowError(Exception):
    """Raised for every error beatflow reports on purpose."""


class SettingsError(BeatflowError):
    """Raised when one or more BEATFLOW_* variables hold bad values."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid beatflow settings ({len(self.problems)}):\n{lines}")


class AppConfigError(BeatflowError):
    """Raised by ``init_app`` when the Celery app has settings beatflow cannot run with (all of
    them, at once), or already has beatflow."""

    def __init__(self, app_name: str, problems: Sequence[str]) -> None:
        self.app_name = app_name
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"cannot add beatflow to Celery app {app_name!r} ({len(self.problems)}):\n{lines}"
        )


class DagError(BeatflowError):
    """Raised when a DAG definition is wrong."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        super().__init__(self.location_prefix() + message)

    def location_prefix(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}: " if self.line else f"{self.file}: "


class DagDefinitionError(DagError):
    """Raised when a DAG has a cycle, an unknown dependency, a duplicate id or a bad schedule."""


class DagNotFoundError(BeatflowError):
    """Raised when no loaded DAG has the requested id."""

    def __init__(self, dag_id: str, known: Sequence[str] = (), where: str = "") -> None:
        self.dag_id = dag_id
        close = difflib.get_close_matches(dag_id, list(known), n=1)
        hint = f'; did you mean "{close[0]}"?' if close else (f" {where}" if where else "")
        super().__init__(f'no DAG "{dag_id}" is loaded{hint}')


class ConfError(BeatflowError):
    """Raised when a trigger's conf does not match the DAG's declared params."""

    def __init__(
        self, dag_id: str, problems: Sequence[str], fields: Mapping[str, str] | None = None
    ) -> None:
        self.dag_id = dag_id
        self.problems = list(problems)
        self.fields = dict(fields or {})  # param name -> why its value is refused
        super().__init__(f'bad conf for DAG "{dag_id}": ' + "; ".join(self.problems))


class InvalidIdError(BeatflowError):
    """Raised when a DAG id, task id or run id is empty, too long or has unsafe characters."""

    def __init__(self, kind: str, value: str, reason: str) -> None:
        self.kind = kind
        self.value = value
        super().__init__(f"invalid {kind} {value[:80]!r}: {reason}")


class RunNotFoundError(BeatflowError):
    """Raised when no DAG run has the requested DAG id and run id."""

    def __init__(self, dag_id: str, run_id: str) -> None:
        self.dag_id = dag_id
        self.run_id = run_id
        super().__init__(f"no run {run_id!r} of DAG {dag_id!r}; see `beatflow runs list {dag_id}`")


class DeadLetterNotFoundError(BeatflowError):
    """Raised when no dead letter has the requested id."""

    def __init__(self, letter_id: int) -> None:
        self.letter_id = letter_id
        super().__init__(f"no dead letter {letter_id}; see `beatflow dlq list`")


class DeadLetterStaleError(BeatflowError):
    """Raised when a replay names a dead letter closed as stale: what it stands for no longer
    holds (its run was marked, its task cleared, a newer letter of the same task run)."""

    def __init__(self, letter_id: int, reason: str) -> None:
        self.letter_id = letter_id
        self.reason = reason
        super().__init__(
            f"dead letter {letter_id} is stale, not replayed ({reason}); to run its task "
            "again, clear it (`beatflow runs clear`)"
        )


class RunStateError(BeatflowError):
    """Raised when an operator's verb (cancel, clear, mark) does not apply to the run's state."""

    def __init__(self, dag_id: str, run_id: str, state: str, action: str, why: str) -> None:
        self.dag_id = dag_id
        self.run_id = run_id
        self.state = state
        self.action = action
        super().__init__(f"cannot {action} run {dag_id}/{run_id} ({state}): {why}")


class UnknownTaskError(BeatflowError):
    """Raised when an operator names a task the DAG does not have."""

    def __init__(self, dag_id: str, task_id: str, known: Sequence[str] = ()) -> None:
        self.dag_id = dag_id
        self.task_id = task_id
        close = difflib.get_close_matches(task_id, list(known), n=1)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        super().__init__(f'DAG "{dag_id}" has no task "{task_id}"{hint}')


class TaskValueError(BeatflowError, LookupError):
    """Raised by ``beatflow.task_value`` when no DAG task run's latest try is that Celery task
    (not a DAG task, or a later try replaced it) or the task run has no value (not succeeded)."""

    def __init__(self, celery_task_id: str, state: str | None = None, error: str = "") -> None:
        self.celery_task_id = celery_task_id
        self.state = state
        self.error = error
        if state is None:
            why = "no DAG task run's latest try is this Celery task"
        else:
            why = f"its task run is {state}" + (f": {error}" if error else ", not success")
        super().__init__(f"no value for Celery task {celery_task_id}: {why}")


class BrokerUnavailableError(BeatflowError):
    """Raised when a DAG run cannot be sent because the broker cannot be reached."""

    def __init__(self, dag_id: str, run_id: str, cause: str) -> None:
        self.dag_id = dag_id
        self.run_id = run_id
        super().__init__(
            f"broker unreachable, DAG run {dag_id}/{run_id} not sent ({cause}); it stays queued "
            "and the reconciler sends it once the broker is back"
        )


class StoreError(BeatflowError):
    """Raised when the results database fails or refuses an operation."""


class StoreUnavailableError(StoreError):
    """Raised when the results database cannot be reached; the caller should retry later."""


class SchemaOutOfDateError(StoreError):
    """Raised when the database schema is behind the code."""

    def __init__(
        self, message: str, *, current: str | None = None, head: str | None = None
    ) -> None:
        self.current = current
        self.head = head
        super().__init__(message)


class ResultError(StoreError):
    """Raised when a task's return value is not JSON-serialisable or exceeds the size limit."""

    def __init__(
        self,
        message: str,
        *,
        dedupe_key: str | None = None,
        size: int | None = None,
        limit: int | None = None,
    ) -> None:
        self.dedupe_key = dedupe_key
        self.size = size  # bytes of JSON; None when the value is not JSON at all
        self.limit = limit
        super().__init__(message)


class TaskRunFailedError(BeatflowError):
    """Raised (for Celery to record FAILURE) when a task run failed for good without an
    exception of its own: its worker was lost too often, or ``.map()`` got no list."""


class DeploySkewError(BeatflowError):
    """Raised when a message names a DAG, task or plan part this worker does not have (a
    message sent for another version of the dags folder: a rolled deploy)."""


class NoSuchItemError(BeatflowError):
    """Raised when a .map() instance's index is past the end of the list its task maps over
    (a message no expansion sent): its task run fails and nothing runs."""


class DedupeKeyError(BeatflowError):
    """Raised when an Idempotent task's dedupe_key template cannot be filled from its arguments."""


class SchedulerError(BeatflowError):
    """Raised when the beat cannot run safely with the given settings or Redis."""


class StaleLeaderError(SchedulerError):
    """Raised when a write made for a beat leader epoch older than the newest one is refused."""

    def __init__(self, epoch: int, newest: int) -> None:
        self.epoch = epoch
        self.newest = newest
        super().__init__(
            f"beat leader epoch {epoch} is older than the newest epoch {newest}: "
            "this beat lost the lock, its write is refused"
        )


class DevStackError(BeatflowError):
    """Raised when the embedded dev stack cannot start its Redis or one of its child processes."""


class ChaosSetupError(BeatflowError):
    """Raised when a chaos run cannot start a server it needs (a binary is missing)."""


class MissingExtraError(BeatflowError):
    """Raised when a command or a URL needs an optional extra (web, postgres, flower, embedded)
    whose packages are not installed."""

    def __init__(self, extra: str, purpose: str, missing: Sequence[str]) -> None:
        self.extra = extra
        self.purpose = purpose
        self.missing = list(missing)
        super().__init__(
            f"{purpose} needs the {extra!r} extra ({', '.join(self.missing)} not installed); "
            f"install it: pip install 'beatflow[{extra}]'"
        )


class JsonLimitError(BeatflowError, ValueError):
    """Raised when JSON input is over the size or nesting limit (checked before parsing)."""

    def __init__(self, message: str, *, limit: int) -> None:
        self.limit = limit
        super().__init__(message)
