"""JSON responses, and the one place every error is rendered ({"error": {"status", "message"}}).

The lab's handlers (handlers/base.py) and the embedded upstream
(lab/modes/upstream/server.py) answer through it alike.
"""

from __future__ import annotations

import traceback
from typing import Any

from tornado.web import HTTPError, RequestHandler

from lab.errors import LabError
from lab.web import tornado_private


class JsonHandler(RequestHandler):
    """Every response is JSON, errors included ({"error": {"status", "message"}})."""

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")

    def compute_etag(self) -> None:
        return None  # every answer is fresh (no-store); hashing it would only cost time

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, HTTPError) and error.log_message:
            message = error.log_message % error.args if error.args else error.log_message
        elif status_code >= 500:
            message = "internal server error (the server log has the details)"
        else:
            message = tornado_private.reason(self)
        body: dict[str, Any] = {"status": status_code, "message": message}
        if isinstance(error, LabError):
            for name, value in error.headers.items():
                self.set_header(name, value)
        if self.settings.get("serve_traceback") and "exc_info" in kwargs:
            body["traceback"] = traceback.format_exception(*kwargs["exc_info"])
        # send_error() has reset the headers to set_default_headers(): JSON.
        self.finish({"error": body})
