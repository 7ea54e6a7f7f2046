"""Base handlers: JSON bodies and the one place every error is rendered."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tornado.web import Finish, HTTPError, RequestHandler

from handlers.query import decode_query
from lab.errors import LabError
from lab.modes import MODES
from workloads.params import ParamError

if TYPE_CHECKING:
    from lab.services import Services

T = TypeVar("T")


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
            message = self._reason
        body: dict[str, Any] = {"status": status_code, "message": message}
        if isinstance(error, LabError):
            for name, value in error.headers.items():
                self.set_header(name, value)
        if self.settings.get("serve_traceback") and "exc_info" in kwargs:
            body["traceback"] = traceback.format_exception(*kwargs["exc_info"])
        # send_error() has reset the headers to set_default_headers(): JSON.
        self.finish({"error": body})


class LabHandler(JsonHandler):
    """A lab route: gets the server's services injected, times the request from arrival."""

    services: Services
    # Which /stats bucket this request counts in; None for routes not worth counting.
    stats_mode: str | None = None

    def initialize(self, services: Services) -> None:
        self.services = services
        self._job: asyncio.Future[Any] | None = None
        self._counted = False  # by request_started(), until finish() counts its end

    def prepare(self) -> None:
        self.received = time.time()
        self.services.request_started()
        self._counted = True
        self.query = decode_query(self.request)

    def params(self, parse: Callable[[Mapping[str, Sequence[str]]], dict[str, Any]]) -> dict[str, Any]:
        """The query string through `parse`; a ParamError is the client's 400."""
        try:
            return parse(self.query)
        except ParamError as error:
            raise LabError(400, error.message) from None

    def claim(self, mode: str, workload: str) -> None:
        """This request's share of its process, now that its mode and workload are known (lab/accept.py)."""
        stream = self.request.connection.stream  # type: ignore[union-attr]
        self.services.occupancy.move(stream, self, self.services.share(mode, workload))

    def finish(self, chunk: str | bytes | dict[str, Any] | None = None) -> asyncio.Future[None]:
        # Counted before the response leaves: a client holding its answer that
        # asks /stats next, whichever process answers, finds the request there.
        self._account(self.get_status(), self.request.request_time())
        return super().finish(chunk)

    def finished(self) -> None:
        """The response has left (called by the app's log function): release this request's hold on its process."""
        occupancy = self.services.occupancy
        occupancy.release(self)
        occupancy.release(self.request.connection.stream)  # type: ignore[union-attr]

    def _account(self, status: int, seconds: float) -> None:
        # Every ending passes through finish(): errors (send_error), a client that left (Finish), success.
        if self._counted:
            self._counted = False
            self.services.request_finished(self.stats_mode, status, seconds)

    async def until_disconnect(self, work: Awaitable[T]) -> T:
        """Await `work`, cancelling it if the client goes away first.

        Abandoned work must not run: a queued job nobody waits for would make
        the next caller wait behind it. The server cancels it too when its
        grace period for stopping runs out.
        """
        job: asyncio.Future[T] = asyncio.ensure_future(work)
        self._job = job
        self.services.jobs.add(job)
        try:
            return await job
        except asyncio.CancelledError:
            if not self.request.connection.stream.closed():  # type: ignore[union-attr]
                if self.services.stopping:
                    raise LabError(503, "the server is shutting down; retry", retry_after=1) from None
                raise
            # Nobody to answer; 499 is nginx's "client closed request", so the
            # access log and /stats show what happened.
            self.set_status(499, "Client Closed Request")
            raise Finish() from None
        finally:
            self._job = None
            self.services.jobs.discard(job)

    def on_connection_close(self) -> None:
        if self._job is not None:
            self._job.cancel()


def not_found(path: str) -> LabError:
    """The 404 for a path nothing serves, naming what does (every mode in the registry)."""
    modes = ", ".join(f"/{name}" for name in MODES)
    routes = f"/, /ping, /workloads, /modes, /stats, /metrics, /compare, {modes} or /{{mode}}/{{workload}}"
    return LabError(404, f"no route for {path[:200]!r}; try {routes}")


class NotFoundHandler(LabHandler):
    """JSON 404 for every path no route matches."""

    def prepare(self) -> None:
        super().prepare()  # an absurd URI is a 414 before it is a 404
        raise not_found(self.request.path)
