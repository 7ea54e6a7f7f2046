"""The log is cheap to write: the access log's good lines go a batch at a time, each line's parts are made once;
and no line is lost, repeated or put out of order."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import weakref
from typing import TextIO, TypeVar

from lab.logs import BATCH_LINES, BatchedHandler, Bounded, BoundedFormatter
from tests.procs import wait_for

S = TypeVar("S", bound=TextIO)


def _record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def _handler(stream: S) -> tuple[BatchedHandler, S]:
    handler = BatchedHandler()
    handler.setStream(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler, stream


def test_on_the_event_loop_a_good_access_line_waits_for_the_timer_and_then_is_written() -> None:
    handler, stream = _handler(io.StringIO())

    async def serve() -> None:
        handler.handle(_record("tornado.access", logging.INFO, "200 GET /blocking"))
        handler.handle(_record("tornado.access", logging.INFO, "200 GET /threading"))
        assert stream.getvalue() == ""  # held: no write for it yet
        # Written by the loop's timer, with no other line to push it out.
        await asyncio.to_thread(wait_for, lambda: stream.getvalue() != "", 10)
        assert stream.getvalue() == "200 GET /blocking\n200 GET /threading\n"

    asyncio.run(serve())


def test_any_other_line_is_written_at_once_after_the_lines_held_before_it() -> None:
    handler, stream = _handler(io.StringIO())

    async def serve() -> None:
        handler.handle(_record("tornado.access", logging.INFO, "200 GET /blocking"))
        handler.handle(_record("tornado.access", logging.WARNING, "404 GET /nope"))
        assert stream.getvalue() == "200 GET /blocking\n404 GET /nope\n"
        handler.handle(_record("tornado.access", logging.INFO, "200 GET /threading"))
        handler.handle(_record("lab.server", logging.INFO, "ready"))
        assert stream.getvalue().endswith("404 GET /nope\n200 GET /threading\nready\n")

    asyncio.run(serve())


def test_away_from_an_event_loop_every_line_is_written_at_once() -> None:
    handler, stream = _handler(io.StringIO())
    handler.handle(_record("tornado.access", logging.INFO, "200 GET /blocking"))
    assert stream.getvalue() == "200 GET /blocking\n"


def test_a_full_batch_is_written_without_waiting_for_the_timer() -> None:
    handler, stream = _handler(io.StringIO())

    async def serve() -> None:
        for i in range(BATCH_LINES):
            handler.handle(_record("tornado.access", logging.INFO, f"200 GET /{i}"))
        assert stream.getvalue().splitlines() == [f"200 GET /{i}" for i in range(BATCH_LINES)]

    asyncio.run(serve())


def test_held_lines_are_written_at_exit_once_the_loop_is_gone() -> None:
    handler, stream = _handler(io.StringIO())

    async def serve() -> None:
        handler.handle(_record("tornado.access", logging.INFO, "200 GET /blocking"))

    asyncio.run(serve())  # (its timer went with it, unfired)
    assert stream.getvalue() == ""
    logging.shutdown([weakref.ref(handler)])  # what runs at exit, for this handler alone
    assert stream.getvalue() == "200 GET /blocking\n"


def test_lines_held_at_a_fork_are_written_once_by_the_parent_and_never_by_the_child() -> None:
    read, write = os.pipe()
    handler, stream = _handler(os.fdopen(write, "w"))

    async def serve() -> int:
        handler.handle(_record("tornado.access", logging.INFO, "200 GET /blocking"))
        pid = os.fork()
        if pid == 0:  # the child: whatever it still held, it would write now
            try:
                handler.flush()
            finally:
                os._exit(0)
        return pid

    os.waitpid(asyncio.run(serve()), 0)
    handler.flush()  # the parent's exit (logging.shutdown): whatever it still held, it writes now
    handler.close()
    stream.close()
    with os.fdopen(read) as pipe:
        assert pipe.read() == "200 GET /blocking\n"


def test_a_line_s_time_stamp_is_made_once_a_second_and_is_always_its_own_second_s() -> None:
    shape, stamp = "%(asctime)s.%(msecs)03d %(message)s", "%H:%M:%S"
    ours, logging_s = BoundedFormatter(shape, stamp), logging.Formatter(shape, stamp)
    for created in (1000.2, 1000.9, 1001.1, 999.5, 999.7, 86_400.0):
        record = _record("tornado.access", logging.INFO, "200 GET /blocking")
        record.created, record.msecs = created, (created % 1) * 1000
        assert ours.format(record) == logging_s.format(record)


def test_a_message_is_formatted_once_and_then_kept() -> None:
    record = logging.LogRecord("tornado.access", logging.INFO, __file__, 1, "%d %s 100%%", (200, "GET"), None)
    assert Bounded().filter(record)
    assert (record.msg, record.args, record.getMessage()) == ("200 GET 100%", None, "200 GET 100%")


def test_lines_a_stream_refused_stay_held_and_go_with_the_next_write() -> None:
    handler, stream = _handler(io.StringIO())
    refusing = True
    written = stream.write

    def write(text: str) -> int:
        if refusing:
            raise BlockingIOError(11, "stderr is full")
        return written(text)

    stream.write = write  # type: ignore[method-assign]

    async def serve() -> None:
        nonlocal refusing
        handler.handle(_record("tornado.access", logging.INFO, "200 GET /blocking"))
        logging.raiseExceptions, raised = False, logging.raiseExceptions  # (handleError would print the refusal)
        try:
            handler.handle(_record("tornado.access", logging.WARNING, "404 GET /lost"))
        finally:
            logging.raiseExceptions = raised
        refusing = False
        handler.handle(_record("tornado.access", logging.WARNING, "404 GET /nope"))

    asyncio.run(serve())
    # The warning refused with them is lost, as a line written alone would be; the held line is not.
    assert stream.getvalue() == "200 GET /blocking\n404 GET /nope\n"


def test_the_default_time_stamp_keeps_each_record_s_milliseconds() -> None:
    ours, logging_s = BoundedFormatter("%(asctime)s %(message)s"), logging.Formatter("%(asctime)s %(message)s")
    for created in (1000.2, 1000.9):
        record = _record("lab.server", logging.INFO, "ready")
        record.created, record.msecs = created, (created % 1) * 1000
        assert ours.format(record) == logging_s.format(record)
