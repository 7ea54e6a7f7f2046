"""A burst: c requests sent at once, each on its own connection, timed from the client (bench.scale, bench.crowd)."""

from __future__ import annotations

import asyncio
import time


class _Gate:
    """Opens once `count` clients have arrived: requests go out together, not as connections get made."""

    def __init__(self, count: int) -> None:
        self.waiting = count
        self.opened = asyncio.Event()

    def arrived(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.opened.set()


async def _one(host: str, port: int, target: str, gate: _Gate, deadline: float) -> tuple[float, float, int]:
    """(sent, received, status) of one GET on its own connection, sent when every connection is open."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    finally:
        gate.arrived()
    try:
        await gate.opened.wait()
        sent = time.time()
        writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        async with asyncio.timeout_at(deadline):
            reply = await reader.read()  # the server closes after its answer
        status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.") else 0
        return sent, time.time(), status
    finally:
        writer.close()


async def burst(url: str, target: str, concurrency: int, allowed: float) -> list[tuple[float, float, int]]:
    """Open `concurrency` connections, then send every request at once; each one's (sent, received, status).

    A request still unanswered `allowed` seconds from now counts as failed.
    """
    host, port = url.removeprefix("http://").rsplit(":", 1)
    gate = _Gate(concurrency)
    deadline = asyncio.get_running_loop().time() + allowed
    results = await asyncio.gather(
        *(_one(host, int(port), target, gate, deadline) for _ in range(concurrency)), return_exceptions=True
    )
    now = time.time()
    return [r if isinstance(r, tuple) else (now, now, 0) for r in results]
