"""/async's pooled upstream client against real servers on loopback: reuse, framing, stale connections, faults."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from lab.errors import LabError
from lab.modes.upstream.client import KeepAlivePool, Upstream

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serving(reply: Reply) -> tuple[asyncio.Server, str, list[int]]:
    """A server that runs `reply` for every request on every connection; the connections it accepted, counted."""
    accepted: list[int] = []

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                await reply(reader, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", accepted


def _json_reply(body: bytes = b'{"ok": true}', extra: bytes = b"") -> Reply:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body))
        await writer.drain()

    return reply


def test_calls_in_a_row_share_one_connection_and_concurrent_ones_get_their_own() -> None:
    async def scenario() -> tuple[list[dict[str, object]], int, int]:
        server, url, accepted = await _serving(_json_reply())
        upstream = Upstream(url, "pooled", 5)
        try:
            answers = [await upstream.delay(0) for _ in range(5)]
            in_a_row = len(accepted)
            answers += await asyncio.gather(*(upstream.delay(0) for _ in range(4)))
            return answers, in_a_row, len(accepted)
        finally:
            upstream.close()
            server.close()

    answers, in_a_row, total = asyncio.run(scenario())
    assert answers == [{"ok": True}] * 9
    assert in_a_row == 1  # kept alive and reused
    assert total == 4  # four at once: the idle one plus three more, no queueing


def test_chunked_and_close_delimited_bodies_are_read_whole() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head + b'5;x=y\r\n{"a":\r\n3\r\n 1}\r\n0\r\nT: v\r\n\r\n')  # an extension, a trailer
        await writer.drain()

    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'HTTP/1.0 200 OK\r\n\r\n{"b": 2}')
        await writer.drain()
        writer.close()

    async def scenario() -> list[object]:
        results: list[object] = []
        for reply in (chunked, until_close):
            server, url, accepted = await _serving(reply)
            upstream = Upstream(url, "pooled", 5)
            try:
                results += [await upstream.delay(0), await upstream.delay(0), len(accepted)]
            finally:
                upstream.close()
                server.close()
        return results

    assert asyncio.run(scenario()) == [{"a": 1}, {"a": 1}, 1, {"b": 2}, {"b": 2}, 2]  # no length: no reuse


def test_a_connection_the_upstream_closed_while_idle_is_replaced_silently() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _json_reply()(reader, writer)
        writer.close()  # but it said nothing of closing: the pool keeps the connection

    async def scenario() -> tuple[dict[str, object], dict[str, object], int]:
        server, url, accepted = await _serving(once)
        upstream = Upstream(url, "pooled", 5)
        try:
            first = await upstream.delay(0)
            await asyncio.sleep(0.05)
            return first, await upstream.delay(0), len(accepted)
        finally:
            upstream.close()
            server.close()

    assert asyncio.run(scenario()) == ({"ok": True}, {"ok": True}, 2)


# What the upstream answers, and the words the 502 must use for it.
GARBAGE = {
    "not HTTP": b"SSH-2.0-OpenSSH\r\n\r\n",
    "answered 500": b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",
    "not a JSON object": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnope",
    "malformed body": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "malformed header": b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
}


@pytest.mark.parametrize("fragment", list(GARBAGE))
def test_garbage_is_a_502_naming_what_went_wrong(fragment: str) -> None:
    reply_bytes = GARBAGE[fragment]

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(reply_bytes)
        await writer.drain()
        writer.close()

    async def scenario() -> LabError:
        server, url, _ = await _serving(garbage)
        upstream = Upstream(url, "pooled", 5)
        try:
            with pytest.raises(LabError) as raised:
                await upstream.delay(0)
            return raised.value
        finally:
            upstream.close()
            server.close()

    error = asyncio.run(scenario())
    assert error.status_code == 502 and fragment in error.message


def test_silence_past_the_delay_is_a_504_and_the_connection_is_dropped() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async def scenario() -> tuple[LabError, int]:
        server, url, _ = await _serving(silent)
        upstream = Upstream(url, "pooled", 0.2)
        try:
            with pytest.raises(LabError) as raised:
                await upstream.delay(0.1)
            return raised.value, len(upstream._pool._idle)  # type: ignore[union-attr]
        finally:
            upstream.close()
            server.close()

    error, idle = asyncio.run(scenario())
    assert error.status_code == 504 and "0.2 s" in error.message
    assert idle == 0


def test_the_pool_speaks_plain_http_only() -> None:
    with pytest.raises(ValueError, match="plain HTTP"):
        KeepAlivePool("https://127.0.0.1:1")
