"""Creating the DAG runs of the fires one tick planned, before any watermark moves: in chunks, one
fenced store call (one transaction) each, and DAG by DAG for a chunk that fails for one DAG's
sake. Each DAG's watermark is trimmed to the ticks whose run exists."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from beatflow.errors import StaleLeaderError, StoreUnavailableError
from beatflow.scheduler.plan import Fire
from beatflow.store.records import INSERT_CHUNK

log = logging.getLogger(__name__)

# a DAG whose fire failed (not the DB: that DAG alone) is looked at again this much later
RETRY_DELAY = timedelta(seconds=5)
# the DB is down: the DAGs whose runs were not all made are looked at again this much later
DOWN_DELAY = timedelta(seconds=1)
# fires per fenced call: one multi-row INSERT each
CHUNK = INSERT_CHUNK

# creates (or finds) the DAG run of one tick for the given leader epoch
Create = Callable[[str, Fire, int], None]
# creates (or finds) the DAG runs of many ticks, of many DAGs, in one fenced call: all or none
CreateMany = Callable[[Sequence[tuple[str, Fire]], int], None]


@dataclass(frozen=True, slots=True)
class Created:
    """What creating one tick's runs did."""

    made: list[tuple[str, Fire]]  # the fires whose run exists, oldest first per DAG
    fenced_out: bool  # a newer leader epoch is recorded: nothing may advance
    retry_at: float | None  # unix time a DAG kept due is looked at again, if any


def create_runs(
    pending: Sequence[tuple[str, Fire]],
    *,
    epoch: int,
    now: datetime,
    updates: dict[str, tuple[str, str]],
    create: Create,
    create_many: CreateMany,
    chunk: int = CHUNK,
) -> Created:
    """Create the run of every pending fire, oldest first per DAG, ``chunk`` fires per fenced
    call, and trim each DAG's entry of ``updates`` (dag_id -> (watermark or "", score)) to the
    ticks whose run exists.

    - StaleLeaderError (a newer epoch): ``updates`` is cleared, nothing advances.
    - StoreUnavailableError (the DB is down): every DAG whose runs were not all made stays due
      (its watermark at the last tick whose run exists), looked at again after DOWN_DELAY.
    - Anything else failing a chunk: that chunk DAG by DAG through ``create``, so one DAG's bad
      fire never holds the others; that DAG is retried after RETRY_DELAY, its later fires then.
    """
    by_dag = _by_dag(pending)
    ordered = [(dag_id, fire) for dag_id, fires in by_dag.items() for fire in fires]
    work = _Creation(create, create_many, epoch, now, updates)
    try:
        for start in range(0, len(ordered), chunk):
            work.chunk([(d, f) for d, f in ordered[start : start + chunk] if d not in work.held])
    except StaleLeaderError as exc:
        log.warning("beat: %s; stepping back", exc)
        updates.clear()
        return Created(work.made, True, None)
    except StoreUnavailableError as exc:
        short = [
            d for d, fires in by_dag.items() if d not in work.held and work.last.get(d) != fires[-1]
        ]
        log.warning("beat: results DB unavailable (%s); %d DAGs stay due", exc, len(short))
        due = (now + DOWN_DELAY).timestamp()
        work.retry(due)
        for dag_id in short:
            work.keep(dag_id, due)
    return Created(work.made, False, work.retry_at)


def _by_dag(fires: Sequence[tuple[str, Fire]]) -> dict[str, list[Fire]]:
    """Each DAG's fires, in the order given (DAGs in the order first seen)."""
    by_dag: dict[str, list[Fire]] = {}
    for dag_id, fire in fires:
        by_dag.setdefault(dag_id, []).append(fire)
    return by_dag


@dataclass
class _Creation:
    """One tick's creation so far."""

    create: Create
    create_many: CreateMany
    epoch: int
    now: datetime
    updates: dict[str, tuple[str, str]]
    made: list[tuple[str, Fire]] = field(default_factory=list)
    last: dict[str, Fire] = field(default_factory=dict)  # per DAG, its newest fire with a run
    held: set[str] = field(default_factory=set)  # DAGs whose fire failed: the rest waits
    retry_at: float | None = None

    def chunk(self, fires: list[tuple[str, Fire]]) -> None:
        """One fenced call for ``fires``; DAG by DAG when it fails for another reason than a
        newer leader or the DB being down (those two propagate: they are every DAG's)."""
        if not fires:
            return
        try:
            self.create_many(fires, self.epoch)
        except (StaleLeaderError, StoreUnavailableError):
            raise
        except Exception as exc:  # noqa: BLE001 - whose it is, the DAG-by-DAG pass tells
            log.warning(
                "beat: creating %d runs in one call failed (%s); DAG by DAG now", len(fires), exc
            )
            self.one_by_one(fires)
        else:
            self.record(fires)

    def one_by_one(self, fires: list[tuple[str, Fire]]) -> None:
        for dag_id, mine in _by_dag(fires).items():
            for fire in mine:
                try:
                    self.create(dag_id, fire, self.epoch)
                except (StaleLeaderError, StoreUnavailableError):
                    raise
                except Exception:  # one DAG's bad fire never holds the others
                    log.exception(
                        "beat: firing DAG %s failed at tick %s; retrying in %ds",
                        dag_id,
                        fire.tick,
                        RETRY_DELAY.total_seconds(),
                        extra={"dag_id": dag_id},
                    )
                    due = (self.now + RETRY_DELAY).timestamp()
                    self.held.add(dag_id)
                    self.keep(dag_id, due)
                    self.retry(due)
                    break
                self.record([(dag_id, fire)])

    def record(self, fires: list[tuple[str, Fire]]) -> None:
        self.made += fires
        self.last.update(fires)

    def keep(self, dag_id: str, due: float) -> None:
        """The DAG's watermark stops at the last tick whose run exists; it is due again at
        ``due``."""
        last = self.last.get(dag_id)
        self.updates[dag_id] = ("" if last is None else last.tick.isoformat(), str(due))

    def retry(self, at: float) -> None:
        self.retry_at = min(self.retry_at or at, at)
