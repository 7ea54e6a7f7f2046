"""Logging set-up shared by the server and the embedded upstream: the pid in every line, every line bounded.

What a client sends must not grow the log byte for byte: a logged URI is
clipped to URI_CHARS (clip()), and every record's message, whoever logs it
(Tornado, asyncio, the lab), to MESSAGE_CHARS, with the original length said.

The access log's lines for requests that went well are written together, a
tenth of a second's at a time (BatchedHandler), not with a system call each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from typing import TypeVar

# The part of a request's URI an access-log line repeats.
URI_CHARS = 200
# The most of any one message (and of each line of a traceback) a log line holds.
MESSAGE_CHARS = 500


def clip(text: str, limit: int = URI_CHARS) -> str:
    """`text`, or its first `limit` characters and its length."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


class Bounded(logging.Filter):
    """Clips each record's message to MESSAGE_CHARS (a filter on the handler: it sees every logger's records)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        # Kept formatted, so that the formatter's getMessage() does not format it again.
        record.msg, record.args = clip(message, MESSAGE_CHARS) if len(message) > MESSAGE_CHARS else message, None
        return True


class BoundedFormatter(logging.Formatter):
    """Clips each line of a traceback (an exception's message may quote a request); a second's time stamp is
    made once (the milliseconds are the format's own field), not for every line of that second."""

    _stamp: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is None:  # (logging's default stamp ends in the record's own milliseconds)
            return super().formatTime(record, datefmt)
        second, stamp = self._stamp
        if int(record.created) != second:
            second, stamp = self._stamp = (int(record.created), super().formatTime(record, datefmt))
        return stamp

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        return "\n".join(clip(line, MESSAGE_CHARS) for line in super().formatException(ei).splitlines())


H = TypeVar("H", bound=logging.Handler)

# How long a held access-log line waits for the lines after it (BatchedHandler), and how many may wait.
BATCH_S = 0.1
BATCH_LINES = 256
# The loggers whose lines below WARNING are held: one line for every request the server answers.
BATCHED = frozenset({"tornado.access"})


class BatchedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr, where an access-log line below WARNING is held to be written with the lines after it.

    A line written as it comes is a system call on the event loop's thread for every request, and the thread
    lets go of the GIL for it: at a /threading request's end the pool thread that ran the job still needs the
    GIL to go back to its queue, can take it then, and the loop waits to have it back. Written so, a
    /threading/count?n=1 at one client cost 6 % more (docs/results.md#overhead).
    Held lines are written by a timer of the loop BATCH_S after the first (so as soon after as the loop runs:
    a /blocking run holds it), when BATCH_LINES are held, before any other line (a warning, an error, another
    logger's: written at once, so this process's lines keep their order), and at exit (logging.shutdown
    flushes every handler). A forked child forgets what its parent held: the parent writes it. A process
    killed outright loses the lines it held. Held only on a thread running an event loop, whose timer writes
    them; anywhere else a line is written at once.
    """

    def __init__(self) -> None:
        super().__init__()
        self._held: list[str] = []
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # the loop whose timer will write the held lines
        _batched.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
            if record.levelno < logging.WARNING and record.name in BATCHED and self._hold(line):
                return
            self._write(line)
        except RecursionError:  # (as logging.StreamHandler.emit)
            raise
        except Exception:
            self.handleError(record)

    def _hold(self, line: str) -> bool:
        """Keep `line` to write with the next ones; False where no event loop runs here to write it later."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._held.append(line)
        if len(self._held) >= BATCH_LINES:
            self._write("")
        elif self._timer_loop is not loop:
            self._timer_loop = loop
            loop.call_later(BATCH_S, self._try_write_held)
        return True

    def _write(self, text: str) -> None:
        """The held lines, then `text`, in one write (the caller holds the handler's lock). Held lines are let go
        once written: a stream that refuses them keeps the newest BATCH_LINES held, for the next write."""
        try:
            self.stream.write("".join(self._held) + text if self._held else text)
        except BaseException:
            del self._held[:-BATCH_LINES]
            raise
        self._held.clear()
        self.stream.flush()

    def write_held(self) -> None:
        """Write the lines held, if any."""
        self.acquire()
        try:
            self._timer_loop = None
            if self._held:
                self._write("")
        finally:
            self.release()

    def flush(self) -> None:
        self.write_held()
        super().flush()

    def _try_write_held(self) -> None:
        """write_held, where nobody could hear of a failure (the loop's timer, autoreload's exec): a stream that
        refuses keeps the lines held (_write), for the next line or the exit to write."""
        with contextlib.suppress(Exception):
            self.write_held()

    def _forget_held(self) -> None:
        """In a forked child: its parent writes what it held (the lock is the child's own now: logging's
        after-fork hook made it anew)."""
        self._held.clear()
        self._timer_loop = None


_batched: weakref.WeakSet[BatchedHandler] = weakref.WeakSet()


def write_held() -> None:
    """Write every handler's held lines: before anything that ends the process without logging.shutdown
    (autoreload's exec)."""
    for handler in list(_batched):
        handler._try_write_held()


def _forget_held_after_fork() -> None:
    for handler in list(_batched):
        handler._forget_held()


# What a process held when it forked is its own to write, not its child's too.
os.register_at_fork(after_in_child=_forget_held_after_fork)


# The pid in every line: forked children, pool workers and the upstream interleave.
LINE = "%(asctime)s.%(msecs)03d %(process)d %(levelname)s %(name)s: %(message)s"


def lean_records() -> None:
    """What no line shows is not looked up for each record (the logging HOWTO's "Optimization"): its caller (a
    walk up the stack), its thread, its multiprocessing process's name, its asyncio task. Each was part of the
    cost of every access-log line (docs/instruments.md). For the whole process: a format that asks for a
    line number or a function's name gets 0 and "(unknown function)", and stack_info=True shows no stack."""
    logging._srcfile = None
    logging.logThreads = logging.logMultiprocessing = False
    logging.logAsyncioTasks = False  # type: ignore[attr-defined]  # (Python 3.12+)


def bounded(handler: H) -> H:
    """`handler`, writing the lab's lines (LINE), each bounded."""
    handler.setFormatter(BoundedFormatter(LINE, datefmt="%H:%M:%S"))
    handler.addFilter(Bounded())
    return handler


def configure(level: int = logging.INFO) -> None:
    lean_records()
    logging.basicConfig(level=level, handlers=[BatchedHandler()])
    for handler in logging.getLogger().handlers:
        bounded(handler)
