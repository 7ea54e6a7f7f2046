"""The advisor's load: users sending back to back (closed) or arrivals at a steady rate (open), on asyncio.

One connection per request (HTTP/1.0: the server closes it after its answer,
and answers without chunked encoding), so a request's time includes its
connection, as a browser's first request's does. An asyncio client costs a
fraction of what a thread per user costs: the load must not take the cores
it measures.

Closed: N users, each sending its next request when the last is answered,
for `warmup + seconds`; what was answered in the last `seconds` counts.
Open: the k-th request is due k / rate seconds after the first, whether or
not the server keeps up, and is timed from when it was due, not from when
it went out (a late send is the server's delay too: no coordinated
omission). At most `in_flight` requests are outstanding: an arrival beyond
that is counted as shed, so an overloaded point cannot drown the next.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from dataclasses import dataclass, field

READ_LIMIT = 2**24  # the most of one answer read (16 MB)
REFUSED_PAUSE_S = 0.05  # a user whose request got no answer waits this long before the next


@dataclass(frozen=True)
class Answer:
    """One request: when it was due and answered (time.monotonic seconds), its status (0: no answer), its body."""

    due: float
    done: float
    status: int
    body: bytes = b""

    @property
    def seconds(self) -> float:
        return self.done - self.due


@dataclass
class Tally:
    """What a load brought: the answers that count, those before the window, arrivals shed, the window."""

    answers: list[Answer] = field(default_factory=list)
    window_s: float = 0.0
    shed: int = 0
    early: int = 0  # answered before the window (the warm-up)
    late: int = 0  # answered after it (the load winding down)
    busy_s: float = 0.0  # closed: every request's time, in the window or not (the served ones')
    # Closed: the time in the window with no request in flight (the load generator late to send the next: a
    # server with requests waiting never has it).
    unsent_s: float = 0.0

    @property
    def served(self) -> int:
        """Every request the server answered while the load ran, in the window or not."""
        return len(self.answers) + self.early + self.late

    @property
    def ok(self) -> list[Answer]:
        return [a for a in self.answers if 200 <= a.status < 300]

    @property
    def failed(self) -> int:
        """Answers that were not 2xx, and requests that got no answer (arrivals shed are counted apart)."""
        return len(self.answers) - len(self.ok)


async def fetch(url: str, limit_s: float, *, keep_body: bool = False) -> tuple[int, bytes]:
    """GET `url` on a connection of its own: (status, body if kept); status 0 when no answer came in `limit_s`."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        async with asyncio.timeout(limit_s):
            reader, writer = await asyncio.open_connection(host, port, limit=READ_LIMIT)
            try:
                writer.write(f"GET {target} HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode())
                reply = await reader.read(-1)
            finally:
                writer.close()
    except (OSError, TimeoutError, ValueError):
        return 0, b""
    head, _, body = reply.partition(b"\r\n\r\n")
    fields = head.split(b" ", 2)
    status = int(fields[1]) if len(fields) > 1 and fields[0].startswith(b"HTTP/") and fields[1].isdigit() else 0
    return status, body if keep_body else b""


async def _closed(url: str, users: int, seconds: float, *, warmup_s: float, limit_s: float, keep: bool) -> Tally:
    start = time.monotonic()
    counted_from, end = start + warmup_s, start + warmup_s + seconds
    tally = Tally(window_s=seconds)
    in_flight, quiet_since = 0, start

    async def user() -> None:
        nonlocal in_flight, quiet_since
        while time.monotonic() < end:
            sent = time.monotonic()
            if in_flight == 0 and sent > counted_from:
                tally.unsent_s += sent - max(quiet_since, counted_from)
            in_flight += 1
            status, body = await fetch(url, limit_s, keep_body=keep)
            done = time.monotonic()
            in_flight -= 1
            if in_flight == 0:
                quiet_since = done
            tally.busy_s += done - sent
            if done > end:
                tally.late += 1
                return  # answered after the window: the load was winding down
            if done >= counted_from:
                tally.answers.append(Answer(sent, done, status, body))
            else:
                tally.early += 1
            if status == 0:
                await asyncio.sleep(REFUSED_PAUSE_S)  # not a tight loop of refused connections

    await asyncio.gather(*(user() for _ in range(users)))
    return tally


async def _open(url: str, rate: float, seconds: float, *, in_flight: int, limit_s: float) -> Tally:
    start = time.monotonic()
    tally = Tally(window_s=seconds)
    outstanding: set[asyncio.Task[None]] = set()

    async def one(due: float) -> None:
        status, _ = await fetch(url, limit_s)
        tally.answers.append(Answer(due, time.monotonic(), status))

    for k in range(max(1, round(rate * seconds))):
        due = start + k / rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if len(outstanding) >= in_flight:
            tally.shed += 1
            continue
        task = asyncio.create_task(one(due))
        outstanding.add(task)
        task.add_done_callback(outstanding.discard)
    if outstanding:
        await asyncio.wait(outstanding)
    return tally


def closed(url: str, users: int, seconds: float, *, warmup_s: float = 1.0, limit_s: float = 60.0,
           keep_bodies: bool = False) -> Tally:  # fmt: skip
    """`users` sending back to back for `warmup_s + seconds`; the answers that came in the last `seconds`."""
    return asyncio.run(_closed(url, users, seconds, warmup_s=warmup_s, limit_s=limit_s, keep=keep_bodies))


def open_rate(url: str, rate: float, seconds: float, *, in_flight: int, limit_s: float = 60.0) -> Tally:
    """`rate` arrivals a second for `seconds`, at most `in_flight` outstanding; every answer, timed from its due."""
    return asyncio.run(_open(url, rate, seconds, in_flight=in_flight, limit_s=limit_s))
