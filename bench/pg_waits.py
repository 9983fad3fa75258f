"""What a database's active backends wait on, sampled from ``pg_stat_activity`` while a bench
runs beside it (not a bench of its own: ``make bench`` does not run it).

    .venv/bin/python bench/pg_waits.py [--dsn postgresql://postgres@127.0.0.1:5432/bench_speed]
        [--seconds 20] [--every 0.005]

Prints how many samples found an active backend in each ``wait_event_type:wait_event`` ("-:-"
is on CPU), e.g. ``IO:WALSync`` for a commit waiting on the WAL flush, ``Lock:advisory`` for a
dispatch lock."""

from __future__ import annotations

import argparse
import collections
import time

import psycopg

QUERY = (
    "SELECT coalesce(wait_event_type, '-') || ':' || coalesce(wait_event, '-') "
    "FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND state = 'active'"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/bench_speed")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--every", type=float, default=0.005)
    args = parser.parse_args()
    seen: collections.Counter[str] = collections.Counter()
    samples = 0
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            for (event,) in conn.execute(QUERY):
                seen[event] += 1
            samples += 1
            time.sleep(args.every)
    print(f"{samples} samples over {args.seconds:.0f} s; active backends by wait event:")
    for event, count in seen.most_common():
        print(f"{count:>8}  {count / samples:6.1%}  {event}")


if __name__ == "__main__":
    main()
