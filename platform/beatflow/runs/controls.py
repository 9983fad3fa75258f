"""The operator's verbs on a DAG and its dead letters — pause, unpause, purge — as the CLI, the
web API and the UI call them, each recorded in the audit table with who did it; and the actor
name the CLI records (``cli:<os user>``)."""

from __future__ import annotations

import getpass
import logging

from beatflow.runtime import Runtime
from beatflow.store.records import AuditNote

log = logging.getLogger(__name__)


def cli_actor() -> str:
    """Who runs a CLI command, as the audit table records it: ``cli:<os user>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user}"


def set_paused(
    runtime: Runtime, dag_id: str, paused: bool, *, actor: str, reason: str = ""
) -> None:
    """Pause (no tick of the DAG starts a run; its runs wait queued) or unpause a DAG; raises
    DagNotFoundError for a DAG not loaded here."""
    runtime.dag(dag_id)
    action = "pause" if paused else "unpause"
    runtime.store.set_paused(dag_id, paused, audit=AuditNote(actor, action, {"reason": reason}))
    log.info("DAG %s %sd by %s", dag_id, action, actor, extra={"dag_id": dag_id})


def purge_dead_letters(
    runtime: Runtime, dag_id: str | None = None, *, actor: str, reason: str = ""
) -> int:
    """Delete the dead letters of ``dag_id`` (all DAGs' when None); returns how many."""
    note = AuditNote(actor, "purge", {"reason": reason})
    deleted = runtime.store.purge_dead_letters(dag_id, audit=note)
    log.warning("%d dead letter(s) of %s purged by %s", deleted, dag_id or "every DAG", actor)
    return deleted
