"""A producing task's asset events, recorded by its worker right after its success commits
(data-aware scheduling). Keyed by the task run's dedupe key and try, exactly as the beat
leader's pass records them from the task run's success (``scheduler.assets``): whichever comes
first writes the event, the other finds it, and a worker killed between the commit and this
write loses nothing (the beat records it)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from beatflow.store.assets import ProducedUpdate

if TYPE_CHECKING:
    from beatflow.worker.attempt import Attempt

log = logging.getLogger(__name__)


def record_outlets(attempt: Attempt) -> None:
    """Record the events of the attempt's outlets; never raises."""
    outlets = attempt.spec.outlets
    if not outlets:
        return
    update = ProducedUpdate(
        attempt.key, attempt.try_number, attempt.dag.dag_id, attempt.run.run_id,
        attempt.spec.task_id,
    )  # fmt: skip
    try:
        attempt.runtime.store.record_produced_events([(update, outlets)])
    except Exception as exc:  # noqa: BLE001 - the beat leader records them from the success
        log.warning(
            "task run %s: asset events of %s not recorded here (%s); the beat leader records "
            "them from the task run's success",
            attempt.key,
            ", ".join(outlets),
            exc,
        )
