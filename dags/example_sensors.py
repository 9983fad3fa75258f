"""Sensors: `wait_for_file` waits (in reschedule mode: no worker slot held between pokes) for a
CSV file of the run's date in the inbox folder (EXAMPLE_SENSORS_INBOX, by default a folder under
the system's temp dir), `load` reads what it found, and `ready_flag` shows a sensor of your own
that returns a value. Harmless by default: it only looks at files; with `soft_fail` a run whose
file never came ends with the sensor skipped, not failed. Try it:

    mkdir -p /tmp/beatflow-inbox && touch /tmp/beatflow-inbox/orders-$(date +%F).csv
    beatflow dags trigger example_sensors --wait
"""

import os
import tempfile
from pathlib import Path

from beatflow import DAG, FileSensor, PokeResult, task

INBOX = Path(
    os.environ.get("EXAMPLE_SENSORS_INBOX", Path(tempfile.gettempdir()) / "beatflow-inbox")
)


@task.sensor(poke_interval=30, timeout=3600, mode="reschedule", soft_fail=True)
def ready_flag(ctx) -> PokeResult:
    flag = INBOX / "READY"
    return PokeResult(flag.exists(), flag.read_text().strip() if flag.exists() else None)


@task
def load(files: list[str], flag: str | None) -> str:
    return f"loaded {len(files)} file(s), flag {flag!r}"


with DAG("example_sensors", schedule=None, tags=["example"]):
    files = FileSensor(
        path=str(INBOX / "orders-{ds}*.csv"),
        poke_interval=30,
        exponential_backoff=True,
        max_wait=300,
        timeout=6 * 3600,
        soft_fail=True,
    )
    load(files, ready_flag())
