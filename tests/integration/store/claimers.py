"""Child-process side of the concurrency test: claim every key of a shared list, and for each
"run" outcome record a side effect in a table of its own, then finish the task run. Lives in
its own module so spawned processes import it without pytest."""

from __future__ import annotations

import random
import time
from typing import Any

import sqlalchemy as sa

from beatflow.store import Store

metadata = sa.MetaData()
side_effects = sa.Table(
    "side_effects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dedupe_key", sa.String(200), nullable=False),  # deliberately NOT unique
    sa.Column("worker", sa.Integer, nullable=False),
)


def side_effect_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        return sa.create_engine(url, connect_args={"timeout": 60})
    return sa.create_engine(url)


def claim_all(
    url: str, keys: list[str], worker: int, barrier: Any, report: Any, combined: bool = False
) -> None:
    """Claim ``keys`` in a random order; put (worker, ran, held, done) on ``report``.
    ``combined``: first try the node's read-and-claim statement (DAG run ``race/r``), then the
    plain claim when it did not claim, as the node wrapper does."""
    store = Store(url)
    engine = side_effect_engine(url)
    with engine.connect():  # open connections before the start line, so all start together
        store.is_paused("warm-up")
    order = list(keys)
    random.Random(worker).shuffle(order)
    counts = {"run": 0, "held": 0, "done": 0}
    barrier.wait(timeout=60)
    deadline = time.monotonic() + 120
    while order and time.monotonic() < deadline:
        again = []
        for key in order:
            claim = None
            if combined:
                _, _, claim = store.read_and_claim(
                    "race", "r", key, -1, key, [], worker=f"w{worker}"
                )
            if claim is None:
                claim = store.claim_task_run(
                    key, dag_id="race", run_id="r", task_id=key, worker=f"w{worker}"
                )
            counts[claim.outcome] += 1
            if claim.outcome == "held":  # someone else is running it: look again later
                again.append(key)
            elif claim.outcome == "run":
                with engine.begin() as conn:
                    conn.execute(sa.insert(side_effects).values(dedupe_key=key, worker=worker))
                assert claim.token is not None
                store.finish_task_run(key, claim.token, state="success", result=worker)
        order = again
    engine.dispose()
    store.close()
    report.put((worker, counts["run"], counts["held"], counts["done"], len(order)))
