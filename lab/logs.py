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
        second, stamp = self._stamp
        if int(record.created) != second:
            second, stamp = self._stamp = (int(record.created), super().formatTime(record, datefmt))
        return stamp

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        return "\n".join(clip(line, MESSAGE_CHARS) for line in super().formatException(ei).splitlines())


# How long a held access-log line may wait for the lines after it (BatchedHandler), and how many may wait.
BATCH_S = 0.1
BATCH_LINES = 256
# The loggers whose lines below WARNING are held: one line for every request the server answers.
BATCHED = frozenset({"tornado.access"})


class BatchedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr, where an access-log line below WARNING waits up to BATCH_S to be written with the lines after it.

    A line written as it comes is a system call on the event loop's thread for every request, and the thread
    lets go of the GIL for each: at a /threading request's end the pool thread that ran it still needs the GIL
    to go back to its queue, takes it there, and the loop waits for it to give it back before it can answer
    the next request. A lab writing each line read 1.3-1.6 times a bare Tornado's time for a
    /threading/count?n=1 at one client; writing none, 1.2-1.5 (docs/results.md#overhead).
    Any other line (a warning, an error, another logger's) is written at once, after the lines held before it,
    so the log keeps its order. Held lines are written before a fork (no child inherits them to write again)
    and at exit (logging.shutdown flushes every handler); a process killed outright loses at most BATCH_S's.
    Held only on a thread running an event loop, whose timer writes them.
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
            loop.call_later(BATCH_S, self.flush)
        return True

    def _write(self, text: str) -> None:
        """The held lines, then `text`, in one write (the caller holds the handler's lock)."""
        held, self._held = self._held, []
        self.stream.write("".join(held) + text if held else text)
        self.stream.flush()

    def write_held(self) -> None:
        """Write the lines held, if any."""
        with self.lock if self.lock is not None else contextlib.nullcontext():
            self._timer_loop = None
            if self._held:
                self._write("")

    def flush(self) -> None:
        self.write_held()
        super().flush()


_batched: weakref.WeakSet[BatchedHandler] = weakref.WeakSet()


def _write_held_before_fork() -> None:
    for handler in list(_batched):
        handler.write_held()


os.register_at_fork(before=_write_held_before_fork)


def configure(level: int = logging.INFO) -> None:
    # What no line shows is not looked up for each record (the logging HOWTO's "Optimization"): its caller
    # (a walk up the stack), its thread's, process's and task's names. Each was part of every access-log line.
    logging._srcfile = None
    logging.logThreads = logging.logMultiprocessing = False
    logging.logAsyncioTasks = False  # type: ignore[attr-defined]  # (Python 3.12+)
    # The pid in every line: forked children, pool workers and the upstream interleave.
    logging.basicConfig(level=level, handlers=[BatchedHandler()])
    formatter = BoundedFormatter(
        "%(asctime)s.%(msecs)03d %(process)d %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
        handler.addFilter(Bounded())
