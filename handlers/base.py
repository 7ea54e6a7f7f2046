"""The lab's base handler: services injected, each request's life kept by lab/web/lifecycle.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tornado.web import Finish

from lab.errors import LabError
from lab.modes.registry import MODES
from lab.web.json_handler import JsonHandler
from lab.web.lifecycle import ClientGone, RequestLife
from lab.web.query import decode_query
from workloads.params import ParamError

if TYPE_CHECKING:
    from lab.serve.services import Services

T = TypeVar("T")


class LabHandler(JsonHandler):
    """A lab route: gets the server's services injected; its request is begun, counted and released by its life."""

    services: Services

    def initialize(self, services: Services) -> None:
        self.services = services
        # Begun here, not in prepare(): a request Tornado refuses first (a 405) still ends and releases.
        self.life: RequestLife = services.lifecycle.begin(self.request.connection.stream)  # type: ignore[union-attr]

    def prepare(self) -> None:
        self.query = decode_query(self.request)

    def params(self, parse: Callable[[Mapping[str, Sequence[str]]], dict[str, Any]]) -> dict[str, Any]:
        """The query string through `parse`; a ParamError is the client's 400."""
        try:
            return parse(self.query)
        except ParamError as error:
            raise LabError(400, error.message) from None

    def finish(self, chunk: str | bytes | dict[str, Any] | None = None) -> asyncio.Future[None]:
        # Every ending passes through here: errors (send_error), a client that left (Finish), success.
        self.life.end(self.get_status())
        return super().finish(chunk)

    def on_finish(self) -> None:
        self.life.left()

    async def until_disconnect(self, work: Awaitable[T]) -> T:
        """Await `work`, cancelled if the client goes away first (answered 499) or the server stops waiting (503)."""
        try:
            return await self.life.attend(work)
        except ClientGone:
            # Nobody to answer; 499 is nginx's "client closed request", so the
            # access log and /stats show what happened.
            self.set_status(499, "Client Closed Request")
            raise Finish() from None

    def on_connection_close(self) -> None:
        self.life.client_gone()


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
