"""Logging set-up shared by the server and the embedded upstream: the pid in every line, every line bounded.

What a client sends must not grow the log byte for byte: a logged URI is
clipped to URI_CHARS (clip()), and every record's message, whoever logs it
(Tornado, asyncio, the lab), to MESSAGE_CHARS, with the original length said.
"""

from __future__ import annotations

import logging

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
        if len(message) > MESSAGE_CHARS:
            record.msg, record.args = clip(message, MESSAGE_CHARS), None
        return True


class BoundedFormatter(logging.Formatter):
    """Clips each line of a traceback (an exception's message may quote a request)."""

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        return "\n".join(clip(line, MESSAGE_CHARS) for line in super().formatException(ei).splitlines())


def configure(level: int = logging.INFO) -> None:
    # The pid in every line: forked children, pool workers and the upstream interleave.
    logging.basicConfig(level=level)
    formatter = BoundedFormatter(
        "%(asctime)s.%(msecs)03d %(process)d %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
        handler.addFilter(Bounded())
