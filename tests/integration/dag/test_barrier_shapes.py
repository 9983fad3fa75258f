"""DAGs whose plans nest barriers deep in chords' headers run to success on a real worker, every
task exactly once."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from beatflow.runtime import runtime_of

pytestmark = pytest.mark.slow


def test_the_example_complex_shape_runs_every_task_once_to_success(cluster):
    # a chord (delete_tag_template) in a group that ends a chain (after create_tag) in another
    # chord's header: Celery gave its body the group's own id, so the outer chord
    # (delete_entry_group) counted one part short and the run hung
    dag = runtime_of(cluster.app).dag("t_native_complex")
    assert len(dag.tasks) == 37
    final, tasks = cluster.run("t_native_complex", timeout=60)
    assert final.state == "success", {t: r.state for t, r in tasks.items()}
    assert set(tasks) == set(dag.tasks)
    assert all(r.state == "success" and r.try_number == 1 for r in tasks.values()), tasks
    ran = Counter()
    for line in cluster.log().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("run_id") == final.run_id and " succeeded in " in entry.get("message", ""):
            ran[entry.get("task_id")] += 1
    assert ran == Counter(dict.fromkeys(dag.tasks, 1))
