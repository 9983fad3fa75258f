"""The exporter turns each beat replica's heartbeat into ``beatflow_beat_loop_age_seconds``: a
stuck beat's loop age grows (and the series goes away with the replica)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from beatflow import connections, keys
from beatflow.app import create_app
from beatflow.observability.exporter import Exporter
from beatflow.settings import Settings


def test_the_exporter_reports_each_replicas_loop_age(redis_url: str, tmp_path: Path) -> None:
    settings = Settings(broker_url=redis_url, database_url=f"sqlite:///{tmp_path / 'r.db'}")
    app = create_app(settings, load_dags=False)
    client = connections.redis_client(redis_url, timeout=5)
    exporter = Exporter(app, load_dag_folder=False)
    now = time.time()
    beats = {"loop-fresh": now - 0.5, "loop-stuck": now - 120.0}
    try:
        for name, seen in beats.items():
            record = {"instance": name, "role": "follower", "epoch": 1, "seen": now}
            record |= {"loop_seen": seen, "stall_timeout": 30.0}
            client.set(keys.replica_key(name), json.dumps(record), px=60_000)
        exporter._poll_leader()
        sample = exporter.metrics.registry.get_sample_value
        stuck = sample("beatflow_beat_loop_age_seconds", {"instance": "loop-stuck"})
        fresh = sample("beatflow_beat_loop_age_seconds", {"instance": "loop-fresh"})
        assert stuck is not None and stuck >= 120.0
        assert fresh is not None and fresh < 60.0
        client.delete(keys.replica_key("loop-stuck"))
        exporter._poll_leader()
        assert sample("beatflow_beat_loop_age_seconds", {"instance": "loop-stuck"}) is None
    finally:
        for name in beats:
            client.delete(keys.replica_key(name))
        client.close()
        exporter.stop()
        app.close()
