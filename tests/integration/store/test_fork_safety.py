"""A process forked after the store connected (a worker's pool child started after the
reconciler's thread connected in the parent) gets its own connections: it can use and close
its store without breaking the parent's."""

from __future__ import annotations

import os

from tests.integration.store.conftest import MakeStore


def test_a_forked_child_neither_uses_nor_closes_the_parents_connections(
    make_store: MakeStore,
) -> None:
    store = make_store()
    store.create_dag_run("d", "before-fork")
    assert store.get_dag_run("d", "before-fork") is not None  # a pooled connection now
    pid = os.fork()
    if pid == 0:  # the child: use the store, then close it (closes the child's connections)
        code = 1
        try:
            store.create_dag_run("d", "in-child")
            store.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # the parent's pooled connection still works
    assert store.get_dag_run("d", "in-child") is not None
    assert [r.run_id for r in store.list_dag_runs("d")] == ["in-child", "before-fork"]
