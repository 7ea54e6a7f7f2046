"""Results of finished Dask tasks, fetched from the embedded cluster's scheduler together, one call at a time.

The embedded cluster's client keeps one pooled connection to its scheduler (cluster.py's EMBEDDED_CONNECTIONS),
and its pool closes that connection to open another when a call finds it busy. Each result fetched on its own,
at ten clients three requests in four opened a connection to the scheduler, whose CPU a request was then 1.6x
the floor's (docs/results.md#overhead). Here every result due while a fetch is under way goes in the next one.

A batch must not hold the others hostage: the scheduler's own `gather` is asked (not the client's, which waits
for a result that was lost to be computed again before it answers any), and a result it could not fetch (its
worker died or left) is fetched alone by its request, while the rest of its batch goes in the next fetch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Client, Future

log = logging.getLogger(__name__)

Due = tuple["Future[bytes]", "asyncio.Future[bytes | None]"]


class Fetches:
    """Fetch finished tasks' results through `client()` (None while there is no connection)."""

    def __init__(self, client: Callable[[], Client | None]) -> None:
        self._client = client
        self._due: list[Due] = []
        self._fetching: asyncio.Task[None] | None = None

    def fetch(self, future: Future[bytes]) -> asyncio.Future[bytes | None]:
        """A finished task's result, fetched by the fetch under way or the next. None: fetch it alone (the
        scheduler could not fetch it, or there is no connection, or the fetch failed)."""
        waiter: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._due.append((future, waiter))
        if self._fetching is None:
            self._fetching = asyncio.ensure_future(self._fetch_due())
        return waiter

    async def _fetch_due(self) -> None:
        try:
            while self._due:
                due, self._due = [(f, w) for f, w in self._due if not w.done()], []  # (not those gone since)
                try:
                    again = await self._fetch(due)
                except BaseException:
                    _answer(due + self._due, None)  # each fetched alone (a cancellation: this fetch's)
                    self._due = []
                    raise
                self._due[:0] = again
        finally:
            self._fetching = None

    async def _fetch(self, due: list[Due]) -> list[Due]:
        """Fetch `due` in one call; answer what came, None for what could not; those to fetch again."""
        client = self._client()
        scheduler = client.scheduler if client is not None else None
        if not due or scheduler is None:
            _answer(due, None)
            return []
        try:
            response: dict[str, Any] = await scheduler.gather(keys=[future.key for future, _ in due])
        except Exception:  # the connection broke: each request fetches its own, and learns what happened
            log.debug("a batch of results could not be fetched", exc_info=True)
            _answer(due, None)
            return []
        if response.get("status") == "OK":
            data = response["data"]
            for future, waiter in due:
                if not waiter.done():
                    waiter.set_result(data.get(future.key))
            return []
        # Some could not be fetched (lost with their worker: the scheduler computes them again): those are
        # fetched alone, by their requests; the others, which the scheduler does not send when any failed, again.
        failed = set(response.get("keys", ())) & {future.key for future, _ in due}
        if not failed:  # (an answer not about these: each fetched alone, rather than asked again and again)
            _answer(due, None)
            return []
        _answer([(f, w) for f, w in due if f.key in failed], None)
        return [(f, w) for f, w in due if f.key not in failed]


def _answer(due: list[Due], data: bytes | None) -> None:
    for _, waiter in due:
        if not waiter.done():  # (its request is gone)
            waiter.set_result(data)
