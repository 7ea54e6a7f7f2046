"""The page's database in this process: which one (a URL), opened here, after any fork, on first use.

Every process that runs `page` opens its own: a server process (for the
event loop, its thread pool and its asyncio queries), a process-pool
worker, a Dask worker, a sub-interpreter. Each is told the URL once
(`use`); the connections are made by the process that queries, never
inherited across a fork (a forked child that finds its parent's database
object opens its own).

URLs: `sqlite:///ABSOLUTE/PATH` (the file the lab seeded at start-up) or
`postgresql://...` (psycopg's connection string).
"""

from __future__ import annotations

import os
from typing import Protocol

from workloads.page.errors import Unavailable
from workloads.page.seed import Row

SQLITE = "sqlite://"
POSTGRES = ("postgresql://", "postgres://")


class Database(Protocol):
    kind: str

    def query(self, count: int, db_ms: float) -> list[Row]: ...

    def close(self) -> None: ...


_url: str | None = None
_connections = 1
_opened: tuple[int, Database] | None = None  # (the pid that opened it, it)


def use(url: str | None, connections: int = 1) -> None:
    """Queries in this process go to `url` (None: no database), with up to `connections` at once."""
    global _url, _connections
    if (url, connections) != (_url, _connections):
        close()
        _url, _connections = url, connections


def current() -> Database:
    """This process's database, opened on first use; Unavailable if it was given none."""
    global _opened
    if _opened is not None and _opened[0] == os.getpid():
        return _opened[1]
    if _url is None:
        raise Unavailable("this process was given no database (the server sets one at start-up); retry")
    _opened = (os.getpid(), open_url(_url, _connections))  # a forked child's inherited one is left alone
    return _opened[1]


def open_url(url: str, connections: int) -> Database:
    """A database object for `url` (its module imported only when used: psycopg only for PostgreSQL)."""
    if url.startswith(SQLITE):
        from workloads.page.sqlite import SqliteDatabase  # noqa: PLC0415

        return SqliteDatabase(url.removeprefix(SQLITE))
    if url.startswith(POSTGRES):
        from workloads.page.postgres import PostgresDatabase  # noqa: PLC0415

        return PostgresDatabase(url, connections)
    raise ValueError(f"not a database URL this lab knows: {url[:60]!r} (sqlite:///PATH or postgresql://...)")


def close() -> None:
    """Close this process's connections (what an event loop opened: aclose)."""
    global _opened
    if _opened is not None and _opened[0] == os.getpid():
        _opened[1].close()
    _opened = None


async def aclose() -> None:
    """Close this process's connections, the event loop's asyncio pool included (called on that loop)."""
    if _opened is not None and _opened[0] == os.getpid():
        closing = getattr(_opened[1], "aclose", None)
        if closing is not None:
            await closing()
    close()
