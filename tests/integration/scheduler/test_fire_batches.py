"""The beat creates the runs of a busy tick in fenced chunks, one transaction each (counted by
PostgreSQL), not one per run; a chunk one DAG spoils is made DAG by DAG so the others still get
their runs; the database going down mid-batch leaves every DAG without all its runs due, and no
watermark past a tick whose run does not exist. An in-process BeatflowScheduler on a real dags
folder, Redis and PostgreSQL, driven at a chosen instant."""

from __future__ import annotations

import logging
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from beatflow import keys
from beatflow.app import create_app
from beatflow.runs.fire import scheduled_run_id
from beatflow.scheduler.beat import BeatflowScheduler
from beatflow.scheduler.creation import CHUNK, RETRY_DELAY
from beatflow.scheduler.firing import FireResult
from beatflow.scheduler.sync import specs_of, write_entries
from beatflow.settings import Settings
from beatflow.store import Store
from tests import services
from tests.procs import wait_for

NOW = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
TICKS = [datetime(2026, 6, 1, 11, m, tzinfo=UTC) for m in (58, 59)] + [NOW.replace(second=0)]
BEFORE = TICKS[0] - timedelta(minutes=1)  # every DAG's watermark: three ticks are due
TOKEN = "batch-leader"
EPOCH = 3

MANY = """
from beatflow import DAG, task

@task
def noop() -> int:
    return 1

for i in range({count}):
    with DAG(f"{prefix}_{{i:04d}}", schedule="* * * * *", catchup=True{extra}):
        noop()
"""


def write_dags(folder: Path, prefix: str, count: int, extra: str = "") -> list[str]:
    (folder / f"{prefix}.py").write_text(
        textwrap.dedent(MANY.format(count=count, prefix=prefix, extra=extra))
    )
    return [f"{prefix}_{i:04d}" for i in range(count)]


@contextmanager
def beat_on(tmp: Path, redis_url: str, database_url: str) -> Iterator[BeatflowScheduler]:
    """The beat of the dags folder ``tmp/dags``, its DAGs loaded, holding the lock at EPOCH with
    every entry due at NOW and every watermark at BEFORE."""
    upgrade(database_url)
    settings = Settings.from_env(
        {
            "BEATFLOW_BROKER_URL": redis_url,
            "BEATFLOW_DATABASE_URL": database_url,
            "BEATFLOW_DAGS_FOLDER": str(tmp / "dags"),
            "BEATFLOW_QUEUES": f"q{uuid.uuid4().hex[:6]}",
        }
    )
    app = create_app(settings, load_dags=False)
    beat = BeatflowScheduler(app=app)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        bag = beat.folder.wait(60)
        assert bag is not None and bag.ok, bag
        specs = beat.dispatcher.specs = specs_of(bag)
        client.set(keys.LOCK, TOKEN, px=120_000)
        client.set(keys.EPOCH, EPOCH)
        write_entries(client, TOKEN, specs, NOW)
        client.hset(keys.WATERMARK, mapping=dict.fromkeys(specs, BEFORE.isoformat()))
        yield beat
    finally:
        beat.close()
        app.close()
        client.close()


def upgrade(database_url: str) -> None:
    store = Store(database_url)
    try:
        store.upgrade()
    finally:
        store.close()


def fire(beat: BeatflowScheduler) -> FireResult:
    return beat.dispatcher.fire_due(NOW, (TOKEN, EPOCH))


def watermarks(redis_url: str) -> dict[str, str]:
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        return client.hgetall(keys.WATERMARK)  # type: ignore[return-value]


def due_at(redis_url: str) -> dict[str, float]:
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        entries: list[tuple[str, float]] = client.zrange(  # type: ignore[assignment]
            keys.SCHEDULE, 0, -1, withscores=True
        )
    return {keys.dag_id_of(e): s for e, s in entries if keys.is_dag_entry(e)}


def ticks_with_runs(database_url: str) -> dict[str, list[datetime]]:
    """Each DAG's logical dates, one entry per run, from the results DB."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("select dag_id, run_id, logical_date from dag_runs order by logical_date")
            ).all()
    finally:
        engine.dispose()
    out: dict[str, list[datetime]] = {}
    for dag_id, run_id, logical_date in rows:
        assert run_id == scheduled_run_id(logical_date)
        out.setdefault(dag_id, []).append(logical_date)
    return out


def no_autovacuum(database_url: str) -> None:
    """Autovacuum off for every table of ``database_url``: an autoanalyze of the rows a test
    writes is a transaction of that database, counted by ``committed`` when it happens to run
    inside the window (it did, on a loaded machine)."""
    engine = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                sa.text("select tablename from pg_tables where schemaname = current_schema()")
            ).scalars()
            for table in list(tables):
                conn.execute(sa.text(f'alter table "{table}" set (autovacuum_enabled = false)'))
    finally:
        engine.dispose()


def autovacuum_runs(database_url: str) -> int:
    """How many times autovacuum vacuumed or analyzed a table of ``database_url`` (catalogs
    included); read in a session of its own, whose commits come before ``committed``'s reading
    (it waits for every session to end) or after the window."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "select coalesce(sum(autovacuum_count + autoanalyze_count), 0) "
                        "from pg_stat_all_tables"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def committed(admin_url: str, database_url: str) -> int:
    """Transactions committed in ``database_url``'s database so far, once every session of it
    has ended (a session reports its counts to PostgreSQL's statistics when it exits at the
    latest), read from another database so the reading adds none."""
    name = sa.make_url(database_url).database
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:

            def sessions() -> int:
                return int(
                    conn.execute(
                        sa.text("select count(*) from pg_stat_activity where datname = :d"),
                        {"d": name},
                    ).scalar_one()
                )

            wait_for(lambda: sessions() == 0, timeout=30, message=f"every session of {name} to end")
            conn.execute(sa.text("select pg_stat_clear_snapshot()"))
            return int(
                conn.execute(
                    sa.text("select xact_commit from pg_stat_database where datname = :d"),
                    {"d": name},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def test_a_busy_minute_is_created_in_one_transaction_per_chunk_and_every_watermark_advances(
    tmp_path: Path,
    redis_url: str,
    make_postgres_db: Callable[[], str],
    postgres_server: services.PostgresServer,
) -> None:
    (tmp_path / "dags").mkdir()
    dags = write_dags(tmp_path / "dags", "busy", 600)  # 1,800 fires: four chunks of <= 500
    database_url = make_postgres_db()
    with beat_on(tmp_path, redis_url, database_url) as beat:
        no_autovacuum(database_url)  # its analyze of the new rows would count a commit too
        vacuumed = autovacuum_runs(database_url)
        before = committed(postgres_server.admin_url, database_url)
        result = fire(beat)
    after = committed(postgres_server.admin_url, database_url)
    # the system catalogs keep autovacuum (the migrations just changed them a lot): each of its
    # runs inside the window is a transaction of this database, not the beat's
    background = autovacuum_runs(database_url) - vacuumed
    assert result.fired == len(dags) * len(TICKS) and not result.fenced_out
    assert ticks_with_runs(database_url) == dict.fromkeys(dags, TICKS)
    assert watermarks(redis_url) == dict.fromkeys(dags, TICKS[-1].isoformat())
    assert all(score > NOW.timestamp() for score in due_at(redis_url).values())
    # one commit per chunk (four); besides, the store's first connection (SQLAlchemy's set-up of
    # the dialect) and the read of the paused DAGs (autocommit) commit one each. An autovacuum
    # worker's visit that finds nothing to do is no vacuum run but still a transaction or two
    # of the database (it reads the catalogs): up to two are allowed for; a commit per run or
    # per DAG (1,800 or 600) is far outside that
    beats = after - before - background
    assert 4 + 2 <= beats <= 4 + 2 + 2, (before, after, background)


def test_one_dags_bad_fire_in_a_chunk_costs_the_other_dags_nothing(
    tmp_path: Path,
    redis_url: str,
    make_postgres_db: Callable[[], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "dags").mkdir()
    # a param default no JSON column holds: the store refuses the DAG's every run, and the
    # first chunk's insert with them (it is first in the due index)
    (bad,) = write_dags(tmp_path / "dags", "bad", 1, extra=', params={"when": object()}')
    good = write_dags(tmp_path / "dags", "good", 200)  # 603 fires: chunks of 500 and 103
    # the database refuses one DAG's second tick; its third is the first fire of chunk 2
    partial = good[165]
    database_url = make_postgres_db()
    upgrade(database_url)
    engine = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(
                sa.text(
                    f"""
                    create function refuse() returns trigger language plpgsql as $$
                    begin raise exception 'refused' using errcode = 'check_violation'; end $$;
                    create trigger refuse before insert on dag_runs for each row
                    when (new.dag_id = '{partial}'
                          and new.logical_date = '{TICKS[1].isoformat()}')
                    execute function refuse();
                    """
                )
            )
    finally:
        engine.dispose()
    with beat_on(tmp_path, redis_url, database_url) as beat, caplog.at_level(logging.ERROR):
        result = fire(beat)
    whole = [d for d in good if d != partial]
    assert result.fired == len(whole) * len(TICKS) + 1 and not result.fenced_out
    assert ticks_with_runs(database_url) == {**dict.fromkeys(whole, TICKS), partial: TICKS[:1]}
    marks, due = watermarks(redis_url), due_at(redis_url)
    assert {d: marks[d] for d in whole} == dict.fromkeys(whole, TICKS[-1].isoformat())
    assert all(due[d] > NOW.timestamp() + 10 for d in whole)
    # each bad DAG's watermark stops at its last tick with a run, and it is due again soon
    assert (marks[bad], marks[partial]) == (BEFORE.isoformat(), TICKS[0].isoformat())
    retry = (NOW + RETRY_DELAY).timestamp()
    assert (due[bad], due[partial], result.next_due) == pytest.approx((retry, retry, retry))
    lines = [r.getMessage() for r in caplog.records]
    for dag_id, tick in ((bad, TICKS[0]), (partial, TICKS[1])):
        line = f"beat: firing DAG {dag_id} failed at tick {tick}; retrying in 5s"
        assert line in lines, caplog.text


def test_a_deposed_leaders_batch_creates_and_advances_nothing(
    tmp_path: Path, redis_url: str, make_postgres_db: Callable[[], str]
) -> None:
    (tmp_path / "dags").mkdir()
    dags = write_dags(tmp_path / "dags", "stale", 200)
    database_url = make_postgres_db()
    with beat_on(tmp_path, redis_url, database_url) as beat:
        beat.store.raise_epoch_floor(EPOCH + 1)  # a newer leader recorded its epoch
        result = fire(beat)
    assert result.fenced_out and result.fired == 0
    assert ticks_with_runs(database_url) == {}
    assert watermarks(redis_url) == dict.fromkeys(dags, BEFORE.isoformat())
    assert set(due_at(redis_url).values()) == {NOW.timestamp()}


@pytest.mark.slow
def test_the_database_going_down_mid_batch_leaves_every_dag_without_all_its_runs_due(
    tmp_path: Path, redis_url: str, own_postgres: services.OwnedPostgres
) -> None:
    (tmp_path / "dags").mkdir()
    dags = write_dags(tmp_path / "dags", "down", 300)  # 900 fires: chunks of 500 and 400
    engine = sa.create_engine(own_postgres.url, isolation_level="AUTOCOMMIT")
    upgrade(own_postgres.url)
    with engine.connect() as conn:
        # the second chunk's insert (it holds down_0200) stalls in the server until it stops
        conn.execute(
            sa.text(
                """
                create function stall() returns trigger language plpgsql as $$
                begin perform pg_sleep(60); return new; end $$;
                create trigger stall before insert on dag_runs for each row
                when (new.dag_id = 'down_0200') execute function stall();
                """
            )
        )
    engine.dispose()
    outcome: list[FireResult] = []
    with beat_on(tmp_path, redis_url, own_postgres.url) as beat:
        firing = threading.Thread(target=lambda: outcome.append(fire(beat)))
        firing.start()
        probe = sa.create_engine(own_postgres.url, isolation_level="AUTOCOMMIT")
        try:
            with probe.connect() as conn:
                wait_for(
                    lambda: conn.execute(
                        sa.text("select 1 from pg_stat_activity where wait_event = 'PgSleep'")
                    ).first(),
                    timeout=60,
                    message="the second chunk's insert to be in flight",
                )
        finally:
            probe.dispose()
        own_postgres.stop()
        firing.join(60)
        own_postgres.start()
    (result,) = outcome
    assert not result.fenced_out
    made = [d for i, d in enumerate(dags) if (i + 1) * len(TICKS) <= CHUNK]  # whole in chunk 1
    split = dags[len(made)]  # its first tick (or two) in chunk 1, the rest in chunk 2
    assert result.fired == CHUNK
    runs = ticks_with_runs(own_postgres.url)
    assert {d: runs[d] for d in made} == dict.fromkeys(made, TICKS)
    assert runs[split] == TICKS[: CHUNK - len(made) * len(TICKS)]
    assert set(runs) == {*made, split}
    marks, due = watermarks(redis_url), due_at(redis_url)
    for dag_id in dags:
        ticks = runs.get(dag_id, [])
        assert marks[dag_id] == (ticks[-1] if ticks else BEFORE).isoformat(), dag_id
        if len(ticks) < len(TICKS):
            assert due[dag_id] <= (NOW + timedelta(seconds=1)).timestamp(), dag_id
        else:
            assert due[dag_id] > NOW.timestamp() + 1, dag_id
