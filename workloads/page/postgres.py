"""The page's database on PostgreSQL: psycopg 3 connection pools, one per process that queries, opened there.

`db_ms` is `pg_sleep` inside the query: the database itself takes that
long, and the client waits on its socket meanwhile (psycopg releases the
GIL while it waits). The whole query, from taking a connection to the last
row, is timed as waiting on purpose (workloads/waits.py), less what the
thread computed or queued for a core meanwhile (psycopg reading the rows).
The event loop's queries run on an asyncio pool of the same process; a
sub-interpreter, where psycopg_pool cannot start its daemon threads (and
psycopg's C extension does not load: its pure-Python libpq wrapper does),
keeps one connection instead.
A database that refuses, or a pool with no connection to give within
POOL_TIMEOUT_S, is `Unavailable` (the server answers 503).
"""

from __future__ import annotations

import _thread
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from workloads.page.errors import Unavailable
from workloads.page.seed import COLUMNS, TABLE, Row, rows
from workloads.waits import waiting

QUERY = (
    f"SELECT {', '.join(COLUMNS)} FROM (SELECT pg_sleep(%(sleep)s)) AS slept, {TABLE} WHERE id <= %(rows)s ORDER BY id"
)
# How long a query may wait for a connection (or a new one) before the request gets 503: a database that
# went away must not hold requests, and one that comes back is used again by the next query.
POOL_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 3


def seed(url: str, count: int) -> None:
    """Create the page's table on `url` and fill it with the seed rows, unless it holds them already."""
    with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "category TEXT NOT NULL, price_cents INTEGER NOT NULL, stock INTEGER NOT NULL)"
        )
        found = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
        if found is not None and found[0] == count:
            return
        with conn.transaction():
            conn.execute(f"TRUNCATE {TABLE}")
            with conn.cursor().copy(f"COPY {TABLE} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for item in rows(count):
                    copy.write_row(item)


def _params(count: int, db_ms: float) -> dict[str, Any]:
    return {"sleep": db_ms / 1000, "rows": count}


def daemon_threads_allowed() -> bool:
    """False in a sub-interpreter, which refuses daemon threads (psycopg_pool's workers are daemon threads)."""
    check = getattr(_thread, "daemon_threads_allowed", None)  # Python 3.12+
    return True if check is None else bool(check())


class OneConnection:
    """A pool's `connection()` for a sub-interpreter, where psycopg_pool cannot start its threads: the
    interpreter runs one job at a time, so one connection, opened on first use and again after it broke."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True)
            try:
                yield self._conn
            except psycopg.Error:
                self.close()  # (a broken connection, or one in an unknown state: the next query opens another)
                raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class PostgresDatabase:
    """A pool of connections in this process (and, for the event loop, an asyncio pool beside it)."""

    kind = "postgresql"

    def __init__(self, url: str, connections: int) -> None:
        self.url = url
        self.connections = connections
        kwargs = {"connect_timeout": CONNECT_TIMEOUT_S}
        self.pool: ConnectionPool | OneConnection
        if daemon_threads_allowed():
            self.pool = ConnectionPool(url, min_size=1, max_size=connections, timeout=POOL_TIMEOUT_S, kwargs=kwargs,
                                       check=ConnectionPool.check_connection, open=False, num_workers=1)  # fmt: skip
            self.pool.open(wait=False)  # connects in the background: a database down now is a 503 later, not a crash
        else:
            self.pool = OneConnection(url)
        self._async: AsyncConnectionPool | None = None

    def query(self, count: int, db_ms: float) -> list[Row]:
        """The first `count` rows, after `db_ms` of pg_sleep; the whole exchange timed as a wait."""
        try:
            with waiting(), self.pool.connection() as conn:
                return conn.execute(QUERY, _params(count, db_ms)).fetchall()
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as error:
            raise Unavailable(_why(error)) from None

    async def aquery(self, count: int, db_ms: float) -> list[Row]:
        """`query`, awaited on this event loop's asyncio pool: no thread waits."""
        pool = self._async
        if pool is None:  # the first query on this loop opens its pool (set before any await: one pool)
            kwargs = {"connect_timeout": CONNECT_TIMEOUT_S}
            pool = self._async = AsyncConnectionPool(self.url, min_size=1, max_size=self.connections,
                                                     timeout=POOL_TIMEOUT_S, kwargs=kwargs, open=False,
                                                     check=AsyncConnectionPool.check_connection)  # fmt: skip
            await pool.open(wait=False)
        try:
            with waiting():
                async with pool.connection() as conn:
                    cursor = await conn.execute(QUERY, _params(count, db_ms))
                    return await cursor.fetchall()
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as error:
            raise Unavailable(_why(error)) from None

    def close(self) -> None:
        self.pool.close()

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.close()
            self._async = None


def _why(error: Exception) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"the database is unavailable ({first[:200]}); retry"
