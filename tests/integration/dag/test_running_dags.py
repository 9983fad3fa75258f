"""DAG runs end to end on a real worker, Redis and PostgreSQL: data passing, mapping, retries,
failures with every trigger rule, a non-series-parallel DAG, a wide DAG."""

from __future__ import annotations

import pytest
import redis
import sqlalchemy as sa
from celery.canvas import Signature, _chain, _chord, group

from beatflow.dag.compile import SEGMENT_TASK, compile_run, task_name
from beatflow.errors import ConfError
from beatflow.runs import follow_run, trigger_dag
from beatflow.runtime import runtime_of
from beatflow.store.models import map_items
from tests.events import captured_events
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def run(cluster, dag_id, **kw):
    return cluster.run(dag_id, **kw)


def run_capturing(cluster, dag_id, wanted, count):
    """Run ``dag_id`` to success while Celery's own event receiver listens; the capture, the
    events ``wanted`` picks once ``count`` of them arrived, and the run's task runs."""
    with captured_events(cluster.app) as captured:
        final, tasks = run(cluster, dag_id)
        assert final.state == "success", tasks
        wait_for(
            lambda: len([e for e in captured.events if wanted(e)]) >= count,
            30,
            message=f"{count} events of {dag_id}",
        )
    return captured, [e for e in captured.events if wanted(e)], tasks


def test_results_pass_along_a_chain_and_into_a_fan_in(cluster):
    final, tasks = run(cluster, "t_chain")
    assert final.state == "success"
    assert tasks["double"].result == [2, 4, 6]
    assert tasks["total"].result == 12
    assert tasks["join"].result == "LR12"


def test_a_mapped_task_fans_out_at_run_time_and_the_downstream_gets_the_list(cluster):
    final, tasks = run(cluster, "t_map")
    assert final.state == "success"
    assert [tasks[f"square[{i}]"].result for i in range(3)] == [1, 4, 9]
    assert tasks["collect"].result["values"] == [1, 4, 9]
    assert tasks["collect"].result["dedupe_key"] == f"t_map/{final.run_id}/collect"
    # the expansion recorded each instance's item, which the instance read (not the list)
    m = map_items.c
    with cluster.store._read("reading the map's items") as conn:
        items = conn.execute(
            sa.select(m.task_id, m.map_index, m.item)
            .where(m.dag_id == "t_map", m.run_id == final.run_id)
            .order_by(m.map_index)
        ).all()
    assert [tuple(row) for row in items] == [("square", 0, 1), ("square", 1, 2), ("square", 2, 3)]


def test_mapped_instances_that_also_take_the_whole_list_get_their_item_and_the_list(cluster):
    final, tasks = run(cluster, "t_map_whole")
    assert final.state == "success", tasks
    assert [tasks[f"share[{i}]"].result for i in range(3)] == [1 / 6, 2 / 6, 3 / 6]
    assert tasks["collect"].result["values"] == [1 / 6, 2 / 6, 3 / 6]


def test_a_wide_map_fans_in_without_a_chord_and_its_downstream_runs_once(cluster):
    # 150 instances (three chunks of 64) in a fan-in with another branch: the instances go as
    # plain groups, the last to end sends what follows the expander (here: its part of the
    # fan-in's chord), and no chord of its own is kept on the result backend
    backend = redis.Redis.from_url(cluster.app.conf.result_backend)
    stored = f"{cluster.app.backend.task_keyprefix.decode()}*"
    before = set(backend.scan_iter(match=stored))
    final, tasks = run(cluster, "t_map_wide")
    assert final.state == "success", tasks
    assert tasks["tally"].result == {"n": 150, "sum": sum(x * x for x in range(150)), "tag": "L"}
    assert tasks["tally"].try_number == 1
    state = cluster.store.fan_in_state("t_map_wide", final.run_id, "square")
    assert state == (150, 150)
    # a chord per chunk would have run celery.accumulate tasks, which store their results
    results = [backend.get(k) for k in set(backend.scan_iter(match=stored)) - before]
    assert results == []


def test_a_maps_task_sent_events_reach_celerys_receiver_batched_per_chunk(cluster):
    # Flower and celery-exporter see a task-sent event for every instance, and a chunk's
    # events come in one task.multi message (before: one message per instance, 150 here)
    name = task_name("t_map_wide", "square")

    def instance(e):  # the expander has the same name and no map_index
        return e["type"] == "task-sent" and e.get("name") == name and "map_index" in e["kwargs"]

    captured, instances, _ = run_capturing(cluster, "t_map_wide", instance, 150)
    assert len({e["uuid"] for e in instances}) == 150 == len(instances)
    assert all(e["queue"] and e["hostname"] and e["timestamp"] for e in instances)
    carrying = captured.messages_carrying({e["uuid"] for e in instances})
    assert sum(len(m) for m in carrying) == 150
    assert len(carrying) == 3  # one message per chunk (64 + 64 + 22)


def test_a_chain_step_is_sent_with_its_task_sent_event_in_one_round_trip(cluster):
    # numbers -> double -> total is a chain: the worker that ends numbers sends double, and the
    # one that ends double sends total, each message with its task-sent event in one pipeline
    # (the event then travels as a task.multi list). Before: Celery's tracer sent the message,
    # then the event in a message of its own.
    steps = {task_name("t_chain", "double"), task_name("t_chain", "total")}

    def step_sent(e):
        return e["type"] == "task-sent" and e.get("name") in steps

    captured, sent, tasks = run_capturing(cluster, "t_chain", step_sent, 2)
    assert {e["name"] for e in sent} == steps and len(sent) == 2
    assert all(e["queue"] and e["hostname"] and e["timestamp"] for e in sent)
    carrying = captured.bodies_carrying({e["uuid"] for e in sent})
    assert len(carrying) == 2
    assert all(isinstance(body, list) for body in carrying), carrying  # task.multi messages
    assert tasks["total"].result == 12


def test_mapping_over_an_empty_list_runs_no_instance_and_passes_an_empty_list(cluster):
    final, tasks = run(cluster, "t_map_empty")
    assert final.state == "success"
    assert tasks["collect"].result["values"] == []
    assert not [k for k in tasks if k.startswith("square[")]


def test_a_flaky_task_retries_with_backoff_then_succeeds(cluster):
    final, tasks = run(cluster, "t_retry")
    assert final.state == "success"
    assert tasks["flaky"].state == "success"
    assert tasks["flaky"].try_number == 3
    assert tasks["flaky"].result == "ok after 3"


def test_a_failure_is_recorded_and_each_trigger_rule_decides_downstream(cluster):
    final, tasks = run(cluster, "t_rules")
    assert final.state == "failed"
    assert tasks["broken"].state == "failed"
    assert tasks["broken"].try_number == 2  # one retry
    assert "always broken" in tasks["broken"].error
    states = {
        rule: tasks[f"after_{rule}"].state
        for rule in (
            "all_success",
            "all_done",
            "all_failed",
            "one_success",
            "one_failed",
            "none_failed",
        )
    }
    assert states == {
        "all_success": "upstream_failed",
        "all_done": "success",
        "all_failed": "skipped",
        "one_success": "success",
        "one_failed": "success",
        "none_failed": "upstream_failed",
    }
    dead = cluster.store.list_dead_letters("t_rules")
    assert [d.task_id for d in dead if d.run_id == final.run_id] == ["broken"]


def test_skipped_upstream_skips_all_success_and_passes_none_failed(cluster):
    final, tasks = run(cluster, "t_skip")
    assert final.state == "success"
    assert tasks["after_all_failed"].state == "skipped"
    assert tasks["after_all_success"].state == "skipped"
    assert tasks["after_none_failed"].state == "success"


def guaranteed_before(
    canvas: Signature, before: frozenset[str] = frozenset()
) -> dict[str, set[str]]:
    """For each task of a canvas, the tasks Celery has finished before it starts: a chain runs
    its parts in order (a group inside a chain finishes whole first), a group's members run
    side by side, a chord's body runs after its whole header. Read from the canvas alone."""
    out: dict[str, set[str]] = {}

    def walk(sig: Signature, done_before: frozenset[str]) -> set[str]:
        if isinstance(sig, _chord):
            header = set()
            for member in sig.tasks:
                header |= walk(member, done_before)
            return header | walk(sig.body, done_before | header)
        if isinstance(sig, _chain):
            seen: set[str] = set()
            for part in sig.tasks:
                seen |= walk(part, done_before | seen)
            return seen
        if isinstance(sig, group):
            members: set[str] = set()
            for member in sig.tasks:
                members |= walk(member, done_before)
            return members
        name = str(sig.task)
        out[name] = set(done_before)
        return {name}

    walk(canvas, before)
    return out


def test_a_non_series_parallel_dag_respects_every_dependency(cluster):
    dag = runtime_of(cluster.app).dag("t_nsp")
    # The canvas alone orders every real dependency (not the wrapper's wait for upstream rows).
    order = guaranteed_before(compile_run(cluster.app, dag, "probe"))
    for task_id, spec in dag.tasks.items():
        ups = {f"t_nsp.{u}" for u in spec.upstream}
        assert ups <= order[f"t_nsp.{task_id}"], (task_id, order)
    final, tasks = run(cluster, "t_nsp")
    assert final.state == "success"
    # ... and at run time no task of this run had to wait for an upstream row.
    waits = [
        line for line in cluster.log().splitlines()
        if " waits: " in line and f'"run_id": "{final.run_id}"' in line
    ]  # fmt: skip
    assert waits == []


def test_a_wide_dag_is_segmented_and_completes(cluster):
    dag = runtime_of(cluster.app).dag("t_wide")
    order = guaranteed_before(compile_run(cluster.app, dag, "probe"))
    assert SEGMENT_TASK in order  # the 150-wide level travels as a segment, expanded on a worker
    assert len(order) < 10  # no message carries the 150 signatures
    segments_before = cluster.log().count(f"Task {SEGMENT_TASK}[")
    final, tasks = run(cluster, "t_wide")
    assert final.state == "success"
    assert tasks["count"].result == 150
    assert cluster.log().count(f"Task {SEGMENT_TASK}[") > segments_before


def test_the_same_run_id_triggered_twice_is_one_run(cluster):
    first = trigger_dag(runtime_of(cluster.app), "t_chain", run_id="same-id")
    second = trigger_dag(runtime_of(cluster.app), "t_chain", run_id="same-id")
    assert first.run_id == second.run_id
    final = follow_run(runtime_of(cluster.app), "t_chain", "same-id", timeout=60)
    assert final.state == "success"
    runs = cluster.store.list_dag_runs("t_chain", limit=100)
    assert [r.run_id for r in runs].count("same-id") == 1


def test_a_bad_conf_is_refused_and_nothing_is_enqueued(cluster):
    store = cluster.store
    before = len(store.list_dag_runs("t_rules", limit=1000))
    with pytest.raises(ConfError) as err:
        trigger_dag(runtime_of(cluster.app), "t_rules", conf={"fixd": True})
    assert 'unknown key "fixd"' in str(err.value) and 'did you mean "fixed"' in str(err.value)
    with pytest.raises(ConfError, match='"fixed" must be bool'):
        trigger_dag(runtime_of(cluster.app), "t_rules", conf={"fixed": "yes"})
    assert len(store.list_dag_runs("t_rules", limit=1000)) == before


def test_a_bad_result_or_a_time_limit_fails_the_task_run_with_a_clear_error(cluster):
    final, tasks = run(cluster, "t_bad_results")
    assert final.state == "failed"
    assert tasks["not_json"].state == "failed" and "JSON" in tasks["not_json"].error
    assert tasks["too_big"].state == "failed" and "object storage" in tasks["too_big"].error
    assert tasks["too_slow"].state == "failed"
    assert "SoftTimeLimitExceeded" in tasks["too_slow"].error
    assert tasks["after_all_done"].state == "success"


def test_triggering_runs_leaves_no_result_subscriptions_in_the_sender(cluster):
    # celery#3812: a long-lived sender (the beat, an API) must not pile up pub/sub channels
    records = [trigger_dag(runtime_of(cluster.app), "t_map") for _ in range(5)]
    for r in records:
        assert follow_run(runtime_of(cluster.app), "t_map", r.run_id, timeout=60).state == "success"
    consumer = cluster.app.backend.result_consumer
    assert not consumer.subscribed_to


def test_workers_keep_no_result_subscriptions_for_the_fan_outs_and_maps_they_send(cluster):
    # celery#3812 inside the worker: a group sent from a task (a fan-out's next level by
    # Celery's tracer, a .map() expansion) subscribed its sender to every member's result
    # channel, and no beatflow task ever publishes a result: they stayed for the worker's life
    broker = redis.Redis.from_url(cluster.env["BEATFLOW_BROKER_URL"])
    prefix = cluster.app.backend.task_keyprefix.decode()
    for dag_id in ("t_map", "t_wide"):
        final, tasks = run(cluster, dag_id)
        assert final.state == "success", tasks
        channels = [f"{prefix}{t.celery_task_id}" for t in tasks.values() if t.celery_task_id]
        assert len(channels) == len(tasks) >= 4
        subscribed = [name for name, n in broker.pubsub_numsub(*channels) if n]
        assert subscribed == [], f"{dag_id}: {len(subscribed)} of {len(channels)} still subscribed"


def test_an_unexpected_error_in_the_wrapper_fails_the_task_and_the_run_still_closes(cluster):
    final, tasks = run(cluster, "t_bad_key")
    assert final.state == "failed"
    assert tasks["bad_key"].state == "failed"
    assert "could not run the task: KeyError" in tasks["bad_key"].error
    assert tasks["after_all_done"].state == "success"
    # failed for good, so a dead letter to replay once the template is fixed
    letters = cluster.store.list_dead_letters("t_bad_key")
    assert [(d.run_id, d.task_id) for d in letters] == [(final.run_id, "bad_key")]
    assert "could not run the task: KeyError" in letters[0].error
