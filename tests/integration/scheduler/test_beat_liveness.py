"""A beat whose database calls or DAG imports would hang keeps firing: every statement of the
beat is bounded (a locked table costs a tick a timeout, not the beat for ever), and the dags
folder is re-imported off the tick loop (a module that hangs at import leaves the others
firing). Wall time is only ever a deadline here."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from beatflow.store.engine import create_engine
from tests import procs
from tests.integration.scheduler.beatcluster import BeatCluster
from tests.integration.scheduler.test_beat_replicas import assert_every_tick_once

pytestmark = pytest.mark.slow

FAST = {"BEATFLOW_BEAT_DB_TIMEOUT": "1", "BEATFLOW_BEAT_STALL_TIMEOUT": "5"}


def test_a_table_locked_in_the_results_db_does_not_stop_the_ticks(cluster: BeatCluster) -> None:
    cluster.write_dag("live_db")
    cluster.start_worker()
    cluster.start_beat("a", **FAST)
    cluster.wait_runs("live_db", 2)
    engine = create_engine(cluster.settings.database_url)
    try:
        with engine.connect() as conn, conn.begin():
            # the beat reads the paused DAGs from this table on every tick that fires
            conn.execute(sa.text("LOCK TABLE dag_states IN ACCESS EXCLUSIVE MODE"))
            before = len(cluster.runs("live_db"))
            cluster.wait_runs("live_db", before + 3, timeout=60)
    finally:
        engine.dispose()
    assert "cannot read paused DAGs" in cluster.beats[0].log()
    assert_every_tick_once(cluster, "live_db")


def test_a_dag_module_that_hangs_at_import_does_not_stop_the_other_dags(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("live_import")
    cluster.start_worker()
    cluster.start_beat("a", **FAST)
    cluster.wait_runs("live_import", 2)
    (cluster.dags / "hangs.py").write_text("import time\n\ntime.sleep(3600)\n")
    before = len(cluster.runs("live_import"))
    cluster.wait_runs("live_import", before + 8, timeout=60)
    assert_every_tick_once(cluster, "live_import")


def test_a_beat_on_a_database_not_yet_migrated_says_so_once_and_fires_once_it_is(
    cluster: BeatCluster,
) -> None:
    # a deployment whose migration job has not run yet: the beat starts on an empty schema
    cluster.store.downgrade("base")
    cluster.write_dag("later_db")
    beat = cluster.start_beat("a", **FAST)
    procs.wait_for(
        lambda: "beatflow db upgrade" in beat.log(),
        timeout=60,
        message="the beat to name `beatflow db upgrade`",
    )
    assert "Traceback" not in beat.log(), beat.log()[-3000:]
    cluster.store.upgrade()  # the migration job ends: the same beat, not restarted, goes on
    cluster.start_worker()
    cluster.wait_runs("later_db", 2, timeout=60)
    assert beat.log().count("beatflow db upgrade") == 1, beat.log()[-3000:]
    assert "Traceback" not in beat.log(), beat.log()[-3000:]
