"""The lab's HTTP errors: one class, rendered as JSON by lab/web/json_handler.py's JsonHandler."""

from __future__ import annotations

from tornado.web import HTTPError


class LabError(HTTPError):
    """An error with a status, a message for the client and the headers it needs (Retry-After...)."""

    def __init__(
        self, status: int, message: str, *, retry_after: int | None = None, headers: dict[str, str] | None = None
    ) -> None:
        # Pass the message as an argument, not as the format string: a message
        # quoting the client's input may contain '%'.
        super().__init__(status, "%s", message)
        self.message = message
        self.headers = dict(headers or {})
        if retry_after is not None:
            self.headers["Retry-After"] = str(retry_after)
