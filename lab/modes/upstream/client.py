"""How /async calls its upstream: one client per server process, and what its failures mean.

Two clients, chosen with --upstream-client:

pooled  The default: HTTP/1.1 GETs over connections kept open and reused
        (asyncio streams, a minimal response parser: status line, headers,
        Content-Length or chunked body). A call on a warm connection costs the
        event loop a fraction of the CPU Tornado's clients spend on one, and
        with a thousand waits on one loop, CPU per call decides how long the
        last of them waits (docs/modes.md, async).
simple  Tornado's SimpleAsyncHTTPClient, pure Python: a new TCP connection and
        a name lookup (in a thread) per call, as it always sends
        `Connection: close`. Kept to measure against:
        `python -m bench.crowd --server-args '--upstream-client simple'`.

Neither queues calls: the pool opens a connection whenever none is idle, and
the simple client's `max_clients` is far above anything the routes allow.
Past that limit a client would hold calls back silently, and the upstream
would look slow. (Tornado's CurlAsyncHTTPClient pools connections too, but
spends several times the pooled client's Python per call.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

from tornado.httpclient import HTTPClientError
from tornado.simple_httpclient import HTTPTimeoutError, SimpleAsyncHTTPClient

from lab.errors import LabError

MAX_SIMPLE_CALLS = 10_000
# Idle connections kept for reuse; beyond this a burst's extra ones are closed. As many as the
# crowds the lab measures hold (docs/results.md#crowd: up to 10,000 waits), so the next burst finds
# them open: at 5,000 waits, opening ~4,000 anew each burst cost 1.11-1.15 ms of CPU a request
# (server and upstream), reusing them 0.84-0.96. Each keeps a file open here and in the upstream,
# which the burst that opened it held anyway.
MAX_IDLE = 10_000
MAX_HEAD_BYTES = 64 * 1024


class BadReply(ValueError):
    """The upstream's bytes are not an HTTP/1.x response this client can read."""


class _Stale(Exception):
    """A kept-alive connection the upstream had closed: nothing was answered, so try another."""


class KeepAlivePool:
    """GET requests to one HTTP/1.1 server over connections kept alive between calls."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"the pooled client speaks plain HTTP, not {parts.scheme}: use --upstream-client simple")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def get(self, path: str) -> tuple[int, bytes]:
        """(status, body) of GET `path`; OSError if the upstream cannot be reached, BadReply for garbage."""
        request = f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
        while self._idle:
            connection = self._idle.pop()
            with contextlib.suppress(_Stale):
                return await self._exchange(connection, request, reused=True)
        connection = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD_BYTES)
        return await self._exchange(connection, request, reused=False)

    async def _exchange(
        self, connection: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes, *, reused: bool
    ) -> tuple[int, bytes]:
        reader, writer = connection
        keep = False
        try:
            writer.write(request)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as error:
                if reused and not getattr(error, "partial", b""):
                    raise _Stale from None
                raise
            except asyncio.LimitOverrunError:
                raise BadReply("response headers too long") from None
            code, headers, http11 = _parse_head(head)
            body, complete = await _read_body(reader, headers)
            keep = complete and http11 and headers.get("connection", "").lower() != "close"
            return code, body
        finally:
            if keep and len(self._idle) < MAX_IDLE:
                self._idle.append(connection)
            else:
                writer.close()  # also when cancelled or failed mid-exchange: never reuse it

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """Status code, headers (lower-case names) and whether it is HTTP/1.1, from a response head."""
    status, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    version, _, rest = status.partition(" ")
    if version not in ("HTTP/1.0", "HTTP/1.1") or not rest[:3].isdigit():
        raise BadReply(f"not an HTTP response: {status[:60]!r}")
    headers = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadReply(f"malformed header line {line[:60]!r}")
        headers[name.strip().lower()] = value.strip()
    return int(rest[:3]), headers, version == "HTTP/1.1"


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, bool]:
    """The body, and whether its end was known (so the connection can carry another request)."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append((await reader.readexactly(size + 2))[:-2])
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                pass
            return b"".join(chunks), True
        if "content-length" in headers:
            return await reader.readexactly(int(headers["content-length"])), True
    except (ValueError, asyncio.LimitOverrunError) as error:
        raise BadReply(f"malformed body framing ({error})") from None
    return await reader.read(), False  # until the upstream closes


class Upstream:
    """GET {url}/delay?seconds=X, with every failure as the lab's 502 or 504."""

    def __init__(self, url: str, kind: str, allowance: float) -> None:
        self.url = url
        self.kind = kind
        self.allowance = allowance  # --upstream-timeout: the silence allowed past the delay asked for
        self._pool = KeepAlivePool(url) if kind == "pooled" else None
        self._simple = (
            SimpleAsyncHTTPClient(
                force_instance=True,
                max_clients=MAX_SIMPLE_CALLS,
                defaults={"connect_timeout": allowance, "request_timeout": allowance},
            )
            if kind == "simple"
            else None
        )

    async def delay(self, seconds: float) -> dict[str, Any]:
        """The upstream's answer to one call: a JSON object, or LabError 502/504."""
        path = f"/delay?seconds={seconds!r}"
        # The delay is asked for, not a fault: the timeout is the silence beyond it.
        timeout = seconds + self.allowance
        try:
            if self._pool is not None:
                async with asyncio.timeout(timeout):
                    code, body = await self._pool.get(path)
            else:
                assert self._simple is not None
                reply = await self._simple.fetch(f"{self.url}{path}", request_timeout=timeout, raise_error=False)
                if reply.code == 599 and reply.error is not None:
                    raise reply.error
                code, body = reply.code, reply.body or b""
        except (TimeoutError, HTTPTimeoutError):
            raise LabError(
                504, f"upstream {self.url} did not answer within {self.allowance:g} s (--upstream-timeout) of the delay"
            ) from None
        except BadReply as error:
            raise LabError(502, f"upstream {self.url} answered something that is not HTTP: {error}") from None
        except (OSError, HTTPClientError, asyncio.IncompleteReadError) as error:
            why = getattr(error, "strerror", None) or str(error) or type(error).__name__
            raise LabError(502, f"upstream {self.url} unreachable: {why}") from None
        if code != 200:
            raise LabError(502, f"upstream {self.url} answered {code}")
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise LabError(502, f"upstream {self.url} answered something that is not a JSON object")
        return doc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._simple is not None:
            self._simple.close()
