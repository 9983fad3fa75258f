"""What every part of ``Store`` builds on: the database (``Db``: engine, backend, short
transactions), the lease and result-size limits, and the result check."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Self

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from beatflow.errors import ResultError
from beatflow.store.backends import Backend
from beatflow.store.db import Db
from beatflow.store.engine import dumps_json, finite_seconds

if TYPE_CHECKING:
    from beatflow.settings import Settings

RESULT_HINT = "put big data in object storage and return its key"


class StoreBase:
    """Holds the database and the limits; the parts of ``Store`` build on its transactions."""

    def __init__(
        self,
        url: str,
        *,
        lease_seconds: float = 30.0,
        result_max_bytes: int = 1 << 20,
        statement_timeout: float | None = None,
    ) -> None:
        self.url = url
        self.lease_seconds = finite_seconds(lease_seconds, "lease_seconds")
        self.result_max_bytes = int(result_max_bytes)
        self._db = Db(url, statement_timeout=statement_timeout)
        self._backend: Backend = self._db.backend

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """A store for ``settings.database_url`` with its lease and result-size limits."""
        return cls(
            settings.database_url,
            lease_seconds=settings.lease_seconds,
            result_max_bytes=settings.result_max_bytes,
        )

    @property
    def dialect(self) -> str:
        """``postgresql`` or ``sqlite``."""
        return self._backend.name

    @property
    def _engine(self) -> sa.Engine:
        return self._db.engine

    def close(self) -> None:
        """Close every pooled connection; the store must not be used afterwards."""
        self._db.engine.dispose()

    def _insert(self, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT that supports ON CONFLICT on this backend."""
        return self._backend.insert(table)

    def _of_runs(
        self, table: sa.Table, keys: Collection[tuple[str, str]]
    ) -> sa.ColumnElement[bool]:
        """The rows of ``table`` that belong to the DAG runs of ``keys`` (``Backend.of_runs``)."""
        return self._backend.of_runs(table, keys)

    def _write(
        self, action: str, *, transaction: bool = False
    ) -> AbstractContextManager[sa.Connection]:
        """A write (``Db.write``)."""
        return self._db.write(action, transaction=transaction)

    def _read(self, action: str) -> AbstractContextManager[sa.Connection]:
        """A read (``Db.read``)."""
        return self._db.read(action)

    def _driver_rows(
        self, action: str, build: Callable[[], sa.Executable], params: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """A statement on the driver (``Db.driver_rows``, PostgreSQL only)."""
        return self._db.driver_rows(action, build, params)

    def check_result(self, dedupe_key: str, result: Any) -> None:
        """Raise ResultError unless ``result`` is JSON-serialisable within result_max_bytes."""
        try:
            size = len(dumps_json(result).encode())
        except (TypeError, ValueError) as exc:
            raise ResultError(
                f"task run {dedupe_key!r} returned a {type(result).__name__} that is not "
                f"JSON-serialisable ({exc}); return JSON values (dict, list, str, number, bool, "
                f"None) of at most {self.result_max_bytes} bytes; {RESULT_HINT}",
                dedupe_key=dedupe_key,
                limit=self.result_max_bytes,
            ) from exc
        if size > self.result_max_bytes:
            raise ResultError(
                f"task run {dedupe_key!r} returned {size} bytes of JSON, over the limit of "
                f"{self.result_max_bytes} bytes (BEATFLOW_RESULT_MAX_BYTES); {RESULT_HINT}",
                dedupe_key=dedupe_key,
                size=size,
                limit=self.result_max_bytes,
            )
