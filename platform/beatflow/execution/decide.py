"""The node decision, pure: from plain records (the upstream rows, the trigger rule, this task's
own row, the claim's outcome, the try number) decide what the node wrapper does next. No Celery,
no store, no clock: every branch is a unit test (tests/unit/execution).

The wrapper asks twice. Before claiming (``claim=None``): is the task already final, must it
wait for its upstream, is it skipped or upstream_failed by its trigger rule, or should it claim
its dedupe key? After claiming: run it, expand it (a ``.map()``), return the stored result,
wait for the live lease holder, or give up on a task run that keeps killing its worker."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from beatflow.dag.flow import Gate, skipped_by
from beatflow.execution.rules import decide as trigger_rule_decision
from beatflow.states import TASK_RUN_FAILED, TASK_RUN_FINAL, DagRunState, TaskRunState

# A task run whose worker died (SIGKILL, OOM, hard time limit) is taken over and run again, up
# to this many times beyond its own retries; then it is failed instead of looping (celery#1628).
WORKER_LOST_TRIES = 2
# How many times a node waits (about a second each) for upstream rows the canvas should already
# have produced (a redelivery race, a map expansion in flight) before it gives up.
UPSTREAM_WAIT_RETRIES = 20


class Action(StrEnum):
    """What the wrapper does next."""

    CLAIM = "claim"  # claim the dedupe key (then ask again with the claim's outcome)
    RUN = "run"  # run the user's function under the lease just claimed
    EXPAND = "expand"  # a .map() task's own row: record the instance count, send the instances
    DONE = "done"  # already final: the stored result stands, nothing runs
    HELD = "held"  # a live lease elsewhere: retry when it expires
    WAIT = "wait"  # upstream not final yet: retry in a moment
    SKIPPED = "skipped"  # trigger rule: record skipped
    UPSTREAM_FAILED = "upstream_failed"  # trigger rule (or upstream never final): record it
    FAIL_WORKER_LOST = "fail_worker_lost"  # the task keeps killing its worker: fail it


class Row(Protocol):
    """The fields of a task run the decision reads (``TaskRunRecord`` has them)."""

    @property
    def task_id(self) -> str: ...
    @property
    def map_index(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def map_count(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str = ""

    @property
    def recorded_state(self) -> TaskRunState | None:
        """The state to record without running, for SKIPPED and UPSTREAM_FAILED."""
        if self.action is Action.SKIPPED:
            return TaskRunState.SKIPPED
        if self.action is Action.UPSTREAM_FAILED:
            return TaskRunState.UPSTREAM_FAILED
        return None


@dataclass(frozen=True, slots=True)
class ClaimSeen:
    """The claim's outcome as the decision needs it."""

    outcome: str  # "run" | "done" | "held"
    try_number: int  # the try this claim started (run) or the row's (done/held), counted
    # from the last clear or replay (the retry policy's round)
    taken_over: bool  # the row was `running` before: its previous worker died


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything the decision looks at, as plain values."""

    trigger_rule: str
    upstream: Collection[str]  # upstream task ids
    mapped: Collection[str]  # which of them are .map() tasks (their instances count)
    rows: Sequence[Row]  # the upstream task runs of this DAG run (other rows are ignored)
    own: Row | None  # this task run's row, if any (by its dedupe key)
    waits: int  # how many times this message already waited for its upstream
    retries: int  # the task's own retries (tries = retries + 1)
    expands: bool = False  # this is a .map() task's own (index -1) task run
    claim: ClaimSeen | None = None
    # branch and short-circuit tasks above it whose recorded result may skip it (dag/flow.py);
    # their rows are in ``rows`` (read with the upstream's)
    gates: Sequence[Gate] = ()


def decide(s: Situation) -> Decision:
    """The next step of the node wrapper (see the module docstring)."""
    if s.claim is None:
        return _before_claim(s)
    return _after_claim(s, s.claim)


def _before_claim(s: Situation) -> Decision:
    if s.own is not None and s.own.state in TASK_RUN_FINAL:
        return Decision(Action.DONE, f"already {s.own.state}")
    states, missing = upstream_states(s.upstream, s.mapped, s.rows)
    if missing:
        if s.waits < UPSTREAM_WAIT_RETRIES:
            return Decision(Action.WAIT, f"upstream not final yet: {', '.join(sorted(missing))}")
        return Decision(
            Action.UPSTREAM_FAILED,
            f"upstream never became final: {', '.join(sorted(missing))}",
        )
    if s.gates and (why := skipped_by(s.gates, s.rows)):  # type: ignore[arg-type]
        return Decision(Action.SKIPPED, why)  # a recorded decision, whatever the trigger rule
    verdict = trigger_rule_decision(s.trigger_rule, states)
    if verdict == "run":
        return Decision(Action.CLAIM)
    action = Action.SKIPPED if verdict == "skipped" else Action.UPSTREAM_FAILED
    return Decision(action, f"trigger rule {s.trigger_rule}")


def _after_claim(s: Situation, claim: ClaimSeen) -> Decision:
    if claim.outcome == "done":
        return Decision(Action.DONE, "already final")
    if claim.outcome == "held":
        return Decision(Action.HELD, "a live lease holds it")
    lost = claim.try_number - 1
    if claim.taken_over and claim.try_number > s.retries + 1 + WORKER_LOST_TRIES:
        return Decision(
            Action.FAIL_WORKER_LOST,
            f"worker lost {lost} times (killed, out of memory or past its hard time limit); "
            "giving up",
        )
    return Decision(Action.EXPAND if s.expands else Action.RUN)


def upstream_states(
    upstream: Collection[str], mapped: Collection[str], rows: Sequence[Row]
) -> tuple[list[str], set[str]]:
    """The final states that count for the trigger rule, and the upstream tasks not final yet.

    A plain upstream counts by its own row. A mapped upstream whose own row succeeded counts by
    its instances, and only once all ``map_count`` of them are final (all or nothing: never a
    partial list). A mapped upstream whose expansion did not succeed counts as itself.
    """
    own: dict[str, Row] = {}
    instances: dict[str, dict[int, Row]] = {}
    for r in rows:
        if r.task_id not in upstream:
            continue
        if r.map_index < 0:
            own[r.task_id] = r
        else:
            instances.setdefault(r.task_id, {})[r.map_index] = r
    states: list[str] = []
    missing: set[str] = set()
    for task_id in upstream:
        row = own.get(task_id)
        if row is None or row.state not in TASK_RUN_FINAL:
            missing.add(task_id)
            continue
        if task_id not in mapped or row.state != TaskRunState.SUCCESS:
            states.append(row.state)
            continue
        count = row.map_count
        got = instances.get(task_id, {})
        if count is None:
            missing.add(task_id)  # a success without its count: not an expansion we can trust
            continue
        wanted = [got.get(i) for i in range(count)]
        if any(w is None or w.state not in TASK_RUN_FINAL for w in wanted):
            missing.add(task_id)
            continue
        states.extend(w.state for w in wanted if w is not None)
    return states, missing


def run_outcome(
    expected: Mapping[str, bool], rows: Sequence[Row], quiet: Collection[str] = ()
) -> DagRunState | None:
    """The final state of a DAG run, or None while it is not final.

    ``expected`` maps every task id of the DAG to whether it is a ``.map()`` task. The run is
    final only when every task (every map instance) has a final row; missing, running and
    up_for_retry rows never count as success. Then it failed if any counted row failed,
    was upstream_failed or cancelled, else it succeeded. The tasks in ``quiet`` (teardowns:
    ``TaskSpec.fails_run`` False) must end too, but their failure is not the run's.
    """
    mapped = [t for t, is_mapped in expected.items() if is_mapped]
    states, missing = upstream_states(list(expected), mapped, rows)
    if missing or not expected:
        return None
    if quiet:
        states, _ = upstream_states([t for t in expected if t not in quiet], mapped, rows)
    failed = any(s in TASK_RUN_FAILED for s in states)
    return DagRunState.FAILED if failed else DagRunState.SUCCESS
