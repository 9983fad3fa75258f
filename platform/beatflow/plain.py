"""Plain Celery tasks on the beatflow app: the modules named by BEATFLOW_IMPORTS (importable from
the dags folder or PYTHONPATH) are imported by workers and beats, so their ``@shared_task``
functions run on the same workers under the same safety settings (JSON only, acks_late) and show
in Flower under their own names; and ``Idempotent``, a task base class whose ``dedupe_key``
template makes a redelivery or a second call with the same key run the body at most once
successfully, using the results database's claim protocol (the rows of DAG task runs)."""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery import Task
from celery.exceptions import Ignore, Reject, Retry

from beatflow.errors import DedupeKeyError, ResultError, SettingsError

if TYPE_CHECKING:
    from celery import Celery

    from beatflow.settings import Settings
    from beatflow.store import TaskRunRecord

log = logging.getLogger(__name__)

# The dag_id under which Idempotent rows are kept in task_runs: not a valid DAG id, so no DAG's
# rows can be mistaken for them. run_id and task_id hold the Celery task's name.
PLAIN_DAG_ID = "<plain>"
BUILTIN_PREFIXES = ("beatflow.", "celery.")


def install(app: Celery, settings: Settings, *, import_now: bool) -> list[str]:
    """Make BEATFLOW_IMPORTS importable (the dags folder goes on ``sys.path``), have Celery
    import them in workers and beats (its ``imports`` setting), and import them now when
    ``import_now`` (a worker, before its pool forks), checking every task they define."""
    if not settings.imports:
        return []
    folder = str(settings.dags_path.resolve())
    if folder not in sys.path:
        sys.path.append(folder)
    app.conf.imports = tuple(dict.fromkeys((*app.conf.imports, *settings.imports)))
    if not import_now:
        return []
    for module in settings.imports:
        import_module(module, settings)
    names = plain_task_names(app)
    check_tasks(app, names)
    log.info("plain Celery tasks from BEATFLOW_IMPORTS: %s", ", ".join(names) or "none")
    return names


def import_module(module: str, settings: Settings) -> None:
    """Import one BEATFLOW_IMPORTS module; a failure says which, why and where it was looked for."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # any error in user code is reported the same way
        raise SettingsError(
            [
                f"BEATFLOW_IMPORTS={','.join(settings.imports)!r}: module {module!r} could not "
                f"be imported ({type(exc).__name__}: {exc}); it must be importable from the "
                f"dags folder ({settings.dags_folder}) or PYTHONPATH"
            ]
        ) from exc


def plain_task_names(app: Celery) -> list[str]:
    """Names of the tasks on ``app`` that are neither beatflow's nor Celery's nor a DAG's."""
    app.finalize(auto=True)
    out = []
    for name, task in app.tasks.items():
        if name.startswith(BUILTIN_PREFIXES):
            continue
        if getattr(task, "__module__", "").startswith("beatflow_dags."):
            continue  # a DAG task (worker/tasks.py registers them under this module)
        out.append(name)
    return sorted(out)


def check_tasks(app: Celery, names: Iterable[str]) -> None:
    """Refuse plain tasks that opt out of the safety settings every beatflow task runs under."""
    problems = []
    for name in names:
        task = app.tasks[name]
        serializer = task.serializer or app.conf.task_serializer
        if serializer != "json":
            problems.append(
                f"task {name!r} sets serializer={serializer!r}: beatflow accepts JSON only "
                "(pickle would let a message run code); remove the option"
            )
        if task.acks_late is False:
            problems.append(
                f"task {name!r} sets acks_late=False: beatflow runs every task with acks_late "
                "so a lost worker's message is redelivered; remove the option (make the task "
                "idempotent, e.g. base=beatflow.Idempotent)"
            )
    if problems:
        raise SettingsError(problems)


class Idempotent(Task):  # type: ignore[misc]
    """A Celery task base whose ``dedupe_key`` template (fields: the task's arguments by name)
    makes the body run at most once successfully per key: a redelivery or a second call with the
    same key returns the stored result; a key that failed for good runs again on the next call.

        @shared_task(base=beatflow.Idempotent, dedupe_key="invoice:{invoice_id}")
        def send_invoice(invoice_id: int) -> str: ...
    """

    dedupe_key: str | Callable[..., str] | None = None

    def render_dedupe_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        template = self.dedupe_key
        if template is None:
            raise DedupeKeyError(f"task {self.name!r} has base=Idempotent but no dedupe_key")
        try:
            bound = inspect.signature(self.run).bind(*args, **kwargs)
        except TypeError as exc:
            raise DedupeKeyError(f"task {self.name!r} called with bad arguments: {exc}") from exc
        bound.apply_defaults()
        fields = dict(bound.arguments)
        if callable(template):
            return str(template(**fields))
        try:
            return template.format(**fields)
        except (KeyError, IndexError, AttributeError) as exc:
            raise DedupeKeyError(
                f"dedupe_key {template!r} of task {self.name!r} names {exc}, which is not one "
                f"of its arguments ({', '.join(fields) or 'none'})"
            ) from exc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.request.called_directly:
            return self.run(*args, **kwargs)
        from beatflow.runtime import runtime_of

        runtime = runtime_of(self.app)
        store = runtime.store
        key = self.render_dedupe_key(args, kwargs)
        identity = {"dag_id": PLAIN_DAG_ID, "run_id": self.name, "task_id": self.name}
        who = {"worker": self.request.hostname, "celery_task_id": self.request.id}
        claim = store.claim_task_run(key, **identity, **who)
        if claim.outcome == "done" and claim.record.state != "success":
            # failed for good earlier: this is a new call, so it runs again (a new try)
            store.reset_task_run(key)
            claim = store.claim_task_run(key, **identity, **who)
        if claim.outcome == "done":
            log.info(
                "task %s: dedupe key %r already succeeded; returning its result", self.name, key
            )
            return claim.record.result
        if claim.outcome == "held":
            wait = _lease_left(claim.record, runtime.settings.lease_seconds)
            log.info(
                "task %s: dedupe key %r is held by %s; retry in %.1fs",
                self.name,
                key,
                claim.record.worker,
                wait,
            )
            raise self.retry(countdown=wait, max_retries=self.request.retries + 1)
        assert claim.token is not None
        return self._run_claimed(store, runtime.leases, key, claim.token, args, kwargs)

    def _run_claimed(
        self, store: Any, leases: Any, key: str, token: str, args: Any, kwargs: Any
    ) -> Any:
        leases.hold(key, token)
        try:
            try:
                result = self.run(*args, **kwargs)
            except Retry as retry:
                # the task's own retry policy (self.retry, autoretry_for): a new try later
                _record(store, leases, key, token, state="up_for_retry", error=_error(retry.exc))
                raise
            except (Ignore, Reject):
                leases.writing(key)
                store.reset_task_run(key)
                raise
            except Exception as exc:
                _record(store, leases, key, token, state="failed", error=_error(exc))
                raise
            try:
                _record(store, leases, key, token, state="success", result=result)
            except ResultError as exc:
                _record(store, leases, key, token, state="failed", error=str(exc))
                raise
            return result
        finally:
            leases.release(key)


def _record(store: Any, leases: Any, key: str, token: str, **outcome: Any) -> None:
    """Record a claimed run's outcome under its lease; a lease taken over (another worker runs
    the task now) records nothing, and says so here (the renewer leaves it to the writer)."""
    leases.writing(key)
    if not store.finish_task_run(key, token, **outcome):
        log.warning(
            "plain task run %s: this worker's lease was taken over; its %s was not recorded",
            key,
            outcome["state"],
        )


def _error(exc: BaseException | None) -> str | None:
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def _lease_left(record: TaskRunRecord, lease_seconds: float) -> float:
    if record.lease_expires_at is None:
        return lease_seconds
    left = (record.lease_expires_at - datetime.now(UTC)).total_seconds()
    return max(0.5, min(lease_seconds, left + 0.2))


def list_rows(app: Celery, names: Iterable[str] | None = None) -> list[TaskRunRecord]:
    """The Idempotent rows of ``names`` (default: every plain task on ``app``), newest first."""
    from beatflow.runtime import runtime_of

    wanted = list(names) if names is not None else plain_task_names(app)
    store = runtime_of(app).store
    rows = [r for name in wanted for r in store.get_task_runs(PLAIN_DAG_ID, name)]
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(rows, key=lambda r: r.started_at or epoch, reverse=True)
