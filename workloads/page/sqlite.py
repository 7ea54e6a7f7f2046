"""The page's database on SQLite: a file the lab seeded, read by each query on a connection of its own.

SQLite has no sleep: it runs inside the process that queries it. So that a
query takes `db_ms` inside the database, it first counts through a recursive
CTE, in SQLite's C code, for about `db_ms` of CPU time; CPython's sqlite3
releases the GIL for each step of a statement (sqlite3_step), so this part
of the query computes without the GIL (tests/test_page_workload.py measures
it). The count is sized from the speed this process measured (a count it
times before its first query, then each query's own), so it follows the
host's speed; the envelope's `cpu_ms` says
what it really took. Nothing waits: on SQLite `io_wait_ms` is 0.

Each query opens the file and closes it when done (tens of microseconds on
a read-only, immutable file, against the milliseconds of the query): a
connection kept per thread would hold a descriptor in every thread that
ever happened to run a query, a count that depends on where jobs landed,
not on what the process holds (the soak's quiet check compares it exactly).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time

from workloads.page.seed import COLUMNS, TABLE, Row, rows

QUERY = f"""
WITH RECURSIVE burn(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM burn WHERE i < :burn)
SELECT {", ".join(COLUMNS)} FROM {TABLE}
WHERE id <= :rows AND (SELECT max(i) FROM burn) >= 0
ORDER BY id
"""
# The count a process first times, to learn the CTE's speed (steps per CPU second) before its first query.
CALIBRATION_STEPS = 50_000
# How much each query's measurement moves the rate: enough to follow the host, not every hiccup.
LEARN = 0.3
# A count shorter than this CPU time measures the clock more than the database: not learnt from.
LEARN_ABOVE_S = 0.002


def create(path: str, count: int) -> None:
    """A new database file at `path` holding the first `count` seed rows."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"CREATE TABLE {TABLE} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, "
            "price_cents INTEGER NOT NULL, stock INTEGER NOT NULL)"
        )
        conn.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?)", rows(count))
    conn.close()


class SqliteDatabase:
    """The seeded file, opened read-only (and immutable: nobody writes it) by each query."""

    kind = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self.rate: float | None = None  # learnt on first use, in the process that queries

    def query(self, count: int, db_ms: float) -> list[Row]:
        """The first `count` rows, after about `db_ms` of CPU inside SQLite."""
        with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True)) as conn:
            if self.rate is None:
                # One row: with none to look at, SQLite would never evaluate the count (the WHERE's other half).
                self.rate = CALIBRATION_STEPS / max(1e-6, self._count(conn, CALIBRATION_STEPS, 1)[0])
            burn = int(self.rate * db_ms / 1000)
            spent, cursor = self._count(conn, burn, count)
            if spent > LEARN_ABOVE_S:
                self.rate += LEARN * (burn / spent - self.rate)
            return [tuple(found) for found in cursor.fetchall()]

    @staticmethod
    def _count(conn: sqlite3.Connection, burn: int, count: int) -> tuple[float, sqlite3.Cursor]:
        """Run the query (its first step counts `burn` steps): the thread's CPU seconds it took, and its cursor."""
        start = time.thread_time()
        cursor = conn.execute(QUERY, {"burn": burn, "rows": count})
        return time.thread_time() - start, cursor

    def close(self) -> None:
        """Nothing to close: each query closed its own connection."""
