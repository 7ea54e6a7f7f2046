"""Results of finished Dask tasks, fetched from the scheduler together and one call at a time.

The client's pool opens a connection for each call that finds its connections busy, and the embedded
cluster's, kept to one (cluster.py's EMBEDDED_CONNECTIONS), closes it to open another. Each result fetched
on its own, at ten clients three requests in four opened a connection to the scheduler, whose CPU a request
was then 1.6x the floor's (docs/results.md#overhead). Here every result due while a fetch is under way goes
in the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Client, Future

log = logging.getLogger(__name__)


class Fetches:
    """Fetch finished tasks' results through `client()` (None while there is no connection)."""

    def __init__(self, client: Callable[[], Client | None]) -> None:
        self._client = client
        self._due: list[tuple[Future[bytes], asyncio.Future[bytes | None]]] = []
        self._fetching: asyncio.Task[None] | None = None

    def fetch(self, future: Future[bytes]) -> asyncio.Future[bytes | None]:
        """A finished task's result, fetched by the fetch under way or the next. None: that fetch failed (a
        result of its batch lost with its worker, or cancelled, or no connection): fetch it alone."""
        waiter: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._due.append((future, waiter))
        if self._fetching is None:
            self._fetching = asyncio.ensure_future(self._fetch_due())
        return waiter

    async def _fetch_due(self) -> None:
        try:
            while self._due:
                due, self._due = [(f, w) for f, w in self._due if not w.done()], []  # (not those gone since)
                results: list[bytes | None] = [None] * len(due)
                client = self._client()
                try:
                    if due and client is not None:
                        results = await client.gather([future for future, _ in due])
                except asyncio.CancelledError:
                    self._answer(due + self._due, [None] * len(due + self._due))
                    raise
                except Exception:  # one of them failed since: each is fetched alone, the others still get theirs
                    log.debug("a batch of results could not be fetched together", exc_info=True)
                self._answer(due, results)
        finally:
            self._fetching = None

    @staticmethod
    def _answer(due: list[tuple[Future[bytes], asyncio.Future[bytes | None]]], results: list[bytes | None]) -> None:
        for (_, waiter), data in zip(due, results, strict=True):
            if not waiter.done():  # (its request is gone)
                waiter.set_result(data)
