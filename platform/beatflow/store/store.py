"""``Store``: the one object the rest of beatflow uses to reach the results database (one per
process, shared by its threads). It assembles the parts (DAG runs, task runs and the claim
protocol, dead letters, pause and retention, operators' run control and audit) and owns the
schema checks."""

from __future__ import annotations

from beatflow.errors import SchemaOutOfDateError, StoreError
from beatflow.settings import mask_url
from beatflow.store import schema
from beatflow.store.asset_retention import AssetRetentionMixin
from beatflow.store.assets import AssetsMixin
from beatflow.store.audit import AuditMixin
from beatflow.store.backfills import BackfillsMixin
from beatflow.store.beat_terms import BeatTermsMixin
from beatflow.store.browse import BrowseMixin
from beatflow.store.dag_runs import DagRunsMixin
from beatflow.store.dead_letters import DeadLettersMixin
from beatflow.store.dispatch import DispatchMixin
from beatflow.store.engine import is_sqlite, sqlite_path, translate_errors
from beatflow.store.fan_ins import FanInsMixin
from beatflow.store.hot import HotPathMixin
from beatflow.store.maintenance import MaintenanceMixin
from beatflow.store.notifications import NotificationsMixin
from beatflow.store.pools import PoolsMixin
from beatflow.store.run_control import RunControlMixin
from beatflow.store.run_creation import RunCreationMixin
from beatflow.store.sensor_pokes import SensorPokesMixin
from beatflow.store.task_logs import TaskLogsMixin
from beatflow.store.task_runs import TaskRunsMixin
from beatflow.store.task_states import TaskStatesMixin


class Store(
    RunCreationMixin,
    DagRunsMixin,
    DispatchMixin,
    TaskRunsMixin,
    TaskStatesMixin,
    DeadLettersMixin,
    MaintenanceMixin,
    BeatTermsMixin,
    RunControlMixin,
    AuditMixin,
    TaskLogsMixin,
    BrowseMixin,
    HotPathMixin,
    FanInsMixin,
    NotificationsMixin,
    AssetsMixin,
    AssetRetentionMixin,
    SensorPokesMixin,
    PoolsMixin,
    BackfillsMixin,
):
    """The results database: DAG runs, task runs (claimed by dedupe key), dead letters, pauses.

    Every method runs its own short transaction and raises only beatflow errors:
    StoreUnavailableError when the database cannot be reached (retry later), StoreError else.
    Times (leases, run timestamps) come from the calling process's UTC clock, not the
    database's, the same on both backends: keep worker clocks in sync to well within
    ``lease_seconds``.
    """

    # ------------------------------------------------------------------ schema

    def upgrade(self) -> str:
        """Bring the schema to the code's head revision (idempotent); return that revision."""
        self._create_sqlite_folder()
        with translate_errors(self.url, "upgrading the schema"):
            revision = schema.migrate(self._engine, "head")
        assert revision is not None
        return revision

    def downgrade(self, revision: str = "base") -> str | None:
        """Migrate the schema down to ``revision`` (for rollbacks and tests)."""
        with translate_errors(self.url, f"downgrading the schema to {revision}"):
            return schema.migrate(self._engine, revision, downgrade=True)

    def current_revision(self) -> str | None:
        """The schema revision the database is at; None if beatflow never upgraded it."""
        with self._read("reading the schema revision") as conn:
            return schema.current_revision(conn)

    @staticmethod
    def head_revision() -> str:
        """The schema revision this code needs."""
        return schema.head_revision()

    def check_schema(self) -> None:
        """Raise SchemaOutOfDateError unless the database is at the code's schema revision."""
        current, head = self.current_revision(), schema.head_revision()
        if current == head:
            return
        where = mask_url(self.url)
        if current is not None and current not in schema.known_revisions():
            raise StoreError(
                f"results database {where} is at schema revision {current}, which this version "
                f"of beatflow does not know (it needs {head}): the database was upgraded by a "
                "newer beatflow; upgrade beatflow here too"
            )
        shown = "none (no beatflow tables)" if current is None else current
        raise SchemaOutOfDateError(
            f"results database {where} is at schema revision {shown}, behind the code's {head}; "
            "run `beatflow db upgrade` (with the same BEATFLOW_DATABASE_URL) and start again",
            current=current,
            head=head,
        )

    def ensure_ready(self) -> None:
        """Start-up check: SQLite (the embedded default) is upgraded automatically; PostgreSQL
        must already be at head (SchemaOutOfDateError says to run `beatflow db upgrade`)."""
        if is_sqlite(self.url):
            self.upgrade()
        else:
            self.check_schema()

    def _create_sqlite_folder(self) -> None:
        path = sqlite_path(self.url) if is_sqlite(self.url) else None
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the folder {path.parent} for the SQLite database {path}: {exc}; "
                "check BEATFLOW_DATABASE_URL and the folder's permissions"
            ) from exc
