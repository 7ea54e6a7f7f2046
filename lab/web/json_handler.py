"""JSON responses, and the one place every error is rendered ({"error": {"status", "message"}}).

The lab's handlers (handlers/base.py) and the embedded upstream
(lab/modes/upstream/server.py) answer through it alike.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

from tornado.web import HTTPError, RequestHandler

from lab.errors import LabError
from lab.logs import clip
from lab.web import tornado_private

app_log = logging.getLogger("tornado.application")

try:
    import orjson

    _fast_dumps: Callable[[Any], bytes] | None = orjson.dumps
except ImportError:  # no wheel for free-threaded 3.13: the standard library's (lab/instruments/freethreading.py)
    _fast_dumps = None

DEFAULT_HEADERS = {
    "Content-Type": "application/json; charset=UTF-8",
    "Cache-Control": "no-store",
    # A browser must not guess another type than the one sent (a JSON error quoting input as HTML).
    "X-Content-Type-Options": "nosniff",
}


def to_json(value: Any) -> bytes:
    """`value` as JSON: orjson's, an envelope in 0.5 µs against the standard library's 7 (docs/results.md#overhead);
    the standard library's for what orjson refuses (an int past 64 bits, a key that is not a string, a float's
    subclass). JSON has no word for a NaN or an infinity:
    orjson writes null, the standard library NaN or Infinity (as Tornado's json_encode did)."""
    if _fast_dumps is None:
        return json.dumps(value).encode()
    try:
        return _fast_dumps(value)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return json.dumps(value).encode()


class JsonHandler(RequestHandler):
    """Every response is JSON, errors included ({"error": {"status", "message"}})."""

    # The message of the error this request was answered with: the access log's line shows it.
    error_message: str | None = None

    def set_default_headers(self) -> None:
        tornado_private.set_checked_headers(self, DEFAULT_HEADERS)

    def compute_etag(self) -> None:
        return None  # every answer is fresh (no-store); hashing it would only cost time

    def write(self, chunk: str | bytes | dict[str, Any]) -> None:
        # A dict as to_json's bytes; the Content-Type is the default headers' already. (Tornado's own also
        # writes "</" as "<\/", for JSON put inside an HTML page; the lab's is only ever served as JSON, nosniff.)
        super().write(to_json(chunk) if isinstance(chunk, dict) else chunk)

    def allowed_methods(self) -> list[str]:
        """The methods this handler answers: its 405's Allow header."""
        return [
            method
            for method in self.SUPPORTED_METHODS
            if getattr(type(self), method.lower(), None) is not getattr(RequestHandler, method.lower(), None)
        ]

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, HTTPError) and error.log_message:
            message = error.log_message % error.args if error.args else error.log_message
        elif status_code >= 500:
            message = "internal server error (the server log has the details)"
        else:
            message = tornado_private.reason(self)
        self.error_message = message
        body: dict[str, Any] = {"status": status_code, "message": message}
        if isinstance(error, LabError):
            for name, value in error.headers.items():
                self.set_header(name, value)
        if status_code == 405:
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        if self.settings.get("serve_traceback") and "exc_info" in kwargs:
            body["traceback"] = traceback.format_exception(*kwargs["exc_info"])
        # send_error() has reset the headers to set_default_headers(): JSON.
        self.finish({"error": body})

    def log_exception(
        self, typ: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        # An HTTPError is an answer, not a fault: the access log's line for the
        # request has its status and message (Tornado would add a warning of
        # its own, quoting the whole URI, even with the access log off).
        if value is not None and not isinstance(value, HTTPError):
            request = self.request
            app_log.error("uncaught exception answering %s %s", request.method, clip(request.uri or ""), exc_info=value)
