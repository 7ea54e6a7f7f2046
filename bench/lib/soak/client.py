"""The soak's client: one GET per connection over asyncio streams, able to hang up on purpose; the page's race.

Each request opens its own connection and sends `Connection: close`, so a
descriptor the lab holds after the soak went quiet is the lab's, not a
keep-alive of ours. An answer is its status line and body; no answer is one
of a few named errors (refused, reset, closed without an answer, timed out),
or `aborted`: the soak hung up itself (the disconnect fault). The race is
the lab page's WebSocket (handlers/race.py): one JSON message out, its
events back until `done` or `error`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from tornado.httpclient import HTTPClientError
from tornado.websocket import WebSocketClosedError, websocket_connect

MAX_ANSWER_BYTES = 8 << 20  # /stats of a large forked server is tens of kB; nothing the lab sends nears this
ABORTED = "aborted"  # the soak hung up on purpose
# A race that ended with the lab's `error` event: an answer (its message in the body), not a silence.
RACE_ERROR = "race error"


@dataclass
class Answer:
    """What one request got: a status and a body, or an error's name; when it was sent and ended."""

    sent: float
    received: float
    status: int | None = None
    body: bytes = b""
    error: str | None = None

    def json(self) -> Any:
        """The body as JSON; None if it is not."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def _parse(raw: bytes) -> tuple[int | None, bytes]:
    """(status, body) of an HTTP/1.x answer read to its end; (None, b"") if it is not one."""
    head, _, body = raw.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return None, b""
    return int(parts[1]), body


def _error_name(error: BaseException) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, ConnectionResetError | BrokenPipeError):
        return "reset"
    if isinstance(error, TimeoutError):
        return "timeout"
    return type(error).__name__


async def get(host: str, port: int, target: str, allowed: float, *, hang_up_after: float | None = None,
              half: bool = False) -> Answer:  # fmt: skip
    """GET `target` on a connection of its own, given `allowed` seconds; `hang_up_after` seconds: close before
    the answer (aborted); `half`: send half the request line, then close (aborted)."""
    answer = Answer(time.time(), 0.0)
    request = f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(allowed):
            reader, writer = await asyncio.open_connection(host, port)
            answer.sent = time.time()
            writer.write(request[: len(request) // 4] if half else request)
            await writer.drain()
            if half or hang_up_after is not None:
                await asyncio.sleep(0 if half else hang_up_after or 0)
                answer.error = ABORTED
            else:
                raw = await reader.read(MAX_ANSWER_BYTES)
                while chunk := await reader.read(MAX_ANSWER_BYTES):
                    raw += chunk
                answer.status, answer.body = _parse(raw)
                answer.error = None if answer.status is not None else ("closed" if not raw else "garbled")
    except (OSError, TimeoutError) as error:
        answer.error = _error_name(error)
    finally:
        answer.received = time.time()
        if writer is not None:
            writer.close()
    return answer


async def race(host: str, port: int, message: dict[str, Any], allowed: float, *,
               hang_up_after: float | None = None) -> Answer:  # fmt: skip
    """One race over the page's WebSocket: 200 when its `done` event came, else the error named;
    `hang_up_after` seconds: close the socket mid-race instead (aborted).

    The body is the last event (the summary, or the error's message)."""
    answer = Answer(time.time(), 0.0)
    last: Any = None
    try:
        async with asyncio.timeout(allowed):
            socket = await websocket_connect(f"ws://{host}:{port}/race")
            try:
                await socket.write_message(json.dumps(message))
                if hang_up_after is not None:
                    await asyncio.sleep(hang_up_after)
                    answer.error = ABORTED
                while answer.error is None and (text := await socket.read_message()) is not None:
                    last = json.loads(text)
                    if last.get("event") in ("done", "error"):
                        break
            finally:
                socket.close()
    except HTTPClientError as error:  # the handshake was refused: the lab answered with a status
        answer.status, answer.body = error.code, (error.response.body if error.response else b"") or b""
    except (OSError, TimeoutError, WebSocketClosedError, ValueError) as error:
        answer.error = _error_name(error)
    answer.received = time.time()
    if answer.error is None and answer.status is None:
        event = last.get("event") if isinstance(last, dict) else None
        answer.status = 200 if event == "done" else None
        answer.error = None if event == "done" else RACE_ERROR if event == "error" else f"race {event or 'closed'}"
        answer.body = json.dumps(last).encode()[:2000]
    return answer
