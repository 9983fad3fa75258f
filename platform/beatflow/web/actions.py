"""Every change the web API and pages make, in one place, each followed by its audit record
(who, what, which DAG or run, why): pause/unpause, trigger, replay, and the operator's verbs
(cancel, clear, mark) of :mod:`beatflow.runs.operator`. Errors become ApiError with a status."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from beatflow.errors import (
    BeatflowError,
    BrokerUnavailableError,
    ConfError,
    DagNotFoundError,
    DeadLetterStaleError,
    InvalidIdError,
    RunNotFoundError,
    SchemaOutOfDateError,
    StoreUnavailableError,
    UnknownTaskError,
)
from beatflow.runtime import Runtime
from beatflow.store import DagRunRecord
from beatflow.web.auth import Principal
from beatflow.web.limits import ApiError, check_id

log = logging.getLogger(__name__)

MARK_STATES = ("success", "failed")


@contextmanager
def api_errors() -> Iterator[None]:
    """beatflow errors -> HTTP statuses with the error's own message."""
    try:
        yield
    except ApiError:
        raise
    except (DagNotFoundError, RunNotFoundError) as exc:
        raise ApiError(404, str(exc)) from exc
    except (UnknownTaskError, InvalidIdError) as exc:
        raise ApiError(400, str(exc)) from exc
    except BrokerUnavailableError as exc:
        raise ApiError(503, str(exc)) from exc
    except ConfError as exc:
        raise ApiError(400, str(exc), problems=exc.problems, fields=exc.fields or None) from exc
    except DeadLetterStaleError as exc:
        raise ApiError(409, str(exc), reason=exc.reason) from exc
    except StoreUnavailableError as exc:
        raise ApiError(503, f"results database unavailable: {exc}") from exc
    except SchemaOutOfDateError as exc:
        raise ApiError(503, str(exc)) from exc
    except BeatflowError as exc:
        raise ApiError(409, str(exc)) from exc


def set_paused(runtime: Runtime, who: Principal, dag_id: str, paused: bool) -> None:
    from beatflow.runs.controls import set_paused as set_dag_paused

    with api_errors():
        set_dag_paused(runtime, dag_id, paused, actor=who.actor)


def trigger(
    runtime: Runtime,
    who: Principal,
    dag_id: str,
    conf: dict[str, Any] | None,
    run_id: str | None = None,
    reason: str = "",
) -> DagRunRecord:
    from beatflow.runs import trigger_dag

    with api_errors():  # the run id is checked once, by the trigger
        record = trigger_dag(
            runtime, dag_id, conf=conf, run_id=run_id, actor=who.actor, reason=reason
        )
    return record


def replay(runtime: Runtime, who: Principal, letter_id: int, reason: str = "") -> DagRunRecord:
    from beatflow.runs.replay import replay_dead_letter

    with api_errors():
        if runtime.store.get_dead_letter(letter_id) is None:
            raise ApiError(404, f"no dead letter {letter_id}")
        run = replay_dead_letter(runtime, letter_id, actor=who.actor, reason=reason)
    return run


def purge_dead_letters(runtime: Runtime, who: Principal, dag_id: str | None, reason: str) -> int:
    from beatflow.runs.controls import purge_dead_letters as purge

    with api_errors():
        return purge(runtime, dag_id, actor=who.actor, reason=reason)


def _require_run(runtime: Runtime, dag_id: str, run_id: str) -> None:
    runtime.dag(dag_id)
    if runtime.store.get_dag_run(dag_id, run_id) is None:
        raise ApiError(404, f"no run {run_id!r} of DAG {dag_id!r}")


def cancel(
    runtime: Runtime,
    who: Principal,
    dag_id: str,
    run_id: str,
    *,
    reason: str = "",
    terminate: bool = False,
) -> DagRunRecord:
    from beatflow.runs.operator import cancel_run

    with api_errors():
        _require_run(runtime, dag_id, run_id)
        run: DagRunRecord = cancel_run(
            runtime, dag_id, run_id, actor=who.actor, reason=reason, terminate=terminate
        )
    return run


def clear(
    runtime: Runtime,
    who: Principal,
    dag_id: str,
    run_id: str,
    *,
    tasks: Sequence[str] = (),
    downstream: bool = False,
    only_failed: bool = False,
    reason: str = "",
) -> DagRunRecord:
    from beatflow.runs.operator import clear_run

    for task_id in tasks:
        check_id(task_id, "task id")
    with api_errors():
        _require_run(runtime, dag_id, run_id)
        run: DagRunRecord = clear_run(
            runtime,
            dag_id,
            run_id,
            tasks=tuple(tasks),
            downstream=downstream,
            only_failed=only_failed,
            actor=who.actor,
            reason=reason,
        )
    return run


def mark(
    runtime: Runtime,
    who: Principal,
    dag_id: str,
    run_id: str,
    *,
    state: str,
    task_id: str | None = None,
    reason: str = "",
) -> DagRunRecord:
    from beatflow.runs.operator import mark_run

    if state not in MARK_STATES:
        raise ApiError(400, f"state must be one of {', '.join(MARK_STATES)}, got {state!r}")
    if task_id is not None:
        check_id(task_id, "task id")
    with api_errors():
        _require_run(runtime, dag_id, run_id)
        run: DagRunRecord = mark_run(
            runtime, dag_id, run_id, state=state, task_id=task_id, actor=who.actor, reason=reason
        )
    return run
