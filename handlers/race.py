"""WS /race: the lab page's race, run by a separate load generator (`python -m lab.race`).

A browser cannot run a fair race itself: it opens about 6 connections per
host, queues identical URLs, and while /blocking holds the server's event
loop nothing the page asks the server is timed honestly. So the page only
*asks* for a race here; a separate process (the race engine, lab/race/) fires
the requests at this server's own address -- `services.base_url`, never the
request's Host header -- one connection each, released together, with a
/ping probe alongside, and every JSON line it prints is relayed to the page
as one WebSocket message. The page draws from the timestamps in the events,
never from arrival time: during a /blocking race the server cannot relay
anything until a run ends, so events arrive in bursts.

Protocol: the page sends one JSON text message

    {"mode": "processing", "workload": "count", "params": {"n": "2000000"}, "concurrency": 10}

(a mode that runs no workload, async, takes its own params: `delay`/`fanout`) and receives

    {"event": "start", "mode", "workload", "params", "concurrency"}   the race was accepted
    ...the race's events: race, response, pings, done (EVENTS in lab/race/engine.py)...
    {"event": "error", "message"}        bad input, busy, or the load generator failed

after which the server closes the connection. Closing it first stops the race
(the load generator is killed). One race at a time per server process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tornado.websocket import WebSocketClosedError, WebSocketHandler

from handlers.base import HostCheckedHandler, LabHandler
from lab import ROOT
from lab.errors import LabError
from lab.modes.registry import MODES
from lab.modes.upstream import ASYNC_PARAMS
from lab.runs import Refused, Run, own, resolve
from lab.web import tornado_private
from lab.web.hosts import SHOWN
from workloads.params import IntParam, ParamError
from workloads.registry import WORKLOADS

if TYPE_CHECKING:
    from lab.serve.services import Services

log = logging.getLogger(__name__)

PAGE_WARMUP_S = 1
CONCURRENCY = IntParam("concurrency", 10, 1, 50, "simultaneous requests")
# A race request is a few hundred bytes: a larger message gets an error event and close code 1009.
MAX_MESSAGE_BYTES = 4096
# Beyond this Tornado closes the connection unread (1009 "message too big"), with no event: no page sends one.
MAX_FRAME_BYTES = 64 * 1024
# A race request is an object holding one object (params): deeper nesting is refused before json.loads
# walks it (the C parser recurses, and a thousand brackets would raise RecursionError).
MAX_DEPTH = 4
# WebSocket close codes (RFC 6455, 7.4.1).
CLOSE_NORMAL, CLOSE_UNSUPPORTED, CLOSE_INVALID, CLOSE_POLICY, CLOSE_TOO_BIG = 1000, 1003, 1007, 1008, 1009
# One JSON line of the load generator: a response event carries a whole
# envelope, far below this.
MAX_LINE_BYTES = 1 << 20
# Kept from the load generator's stderr, to explain a crash.
STDERR_TAIL_BYTES = 2000
# The answer to a race asked for while another runs in this process (one at a time: two would measure each other).
BUSY = "busy: another race is running on this server; try again when it has finished"


class RaceInputError(ValueError):
    """The page asked for a race this server will not run; `code` is the close code that says why."""

    def __init__(self, message: str, code: int = CLOSE_POLICY) -> None:
        super().__init__(message)
        self.code = code


def nesting(text: str) -> int:
    """How deeply `text`'s JSON arrays and objects nest (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


class LoadGeneratorError(RuntimeError):
    """The load generator ended without finishing the race."""


def _text(name: str, value: object) -> str:
    """A param value as the query string would carry it (the page may send numbers)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    raise RaceInputError(f"{name} must be a string or a number")


def _arg(value: object) -> str:
    """A parsed param value back as text for lab.race's -p NAME=VALUE."""
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class RaceRequest:
    run: Run  # resolved as the route resolves it (for async, what it runs: "upstream", as its envelopes say)
    concurrency: int

    @classmethod
    def parse(cls, message: str | bytes) -> RaceRequest:
        """Validate the page's message with the same parsers (and limits) as the routes."""
        if isinstance(message, bytes):
            raise RaceInputError("send the race as a JSON text message", CLOSE_UNSUPPORTED)
        if len(message) > MAX_MESSAGE_BYTES:
            raise RaceInputError(
                f"the race request is {len(message)} characters; at most {MAX_MESSAGE_BYTES}", CLOSE_TOO_BIG
            )
        if nesting(message) > MAX_DEPTH:
            raise RaceInputError(f"the race request nests deeper than {MAX_DEPTH} levels", CLOSE_INVALID)
        try:
            doc = json.loads(message)
        except (ValueError, RecursionError):
            raise RaceInputError("the race request is not JSON", CLOSE_INVALID) from None
        if not isinstance(doc, dict):
            raise RaceInputError("the race request must be a JSON object", CLOSE_INVALID)
        unknown = set(doc) - {"mode", "workload", "params", "concurrency"}
        if unknown:
            raise RaceInputError(f"unknown field(s) {', '.join(sorted(unknown))[:100]}; allowed: "
                                 "mode, workload, params, concurrency")  # fmt: skip
        mode = MODES.get(doc["mode"]) if isinstance(doc.get("mode"), str) else None
        if mode is None:
            raise RaceInputError(f"mode must be one of: {', '.join(MODES)}")
        raw = doc.get("params", {})
        if not isinstance(raw, dict):
            raise RaceInputError("params must be an object of NAME: VALUE")
        query = {str(name): [_text(str(name), value)] for name, value in raw.items()}
        concurrency_raw = doc.get("concurrency", CONCURRENCY.default)
        name = doc.get("workload")
        if name is not None and not isinstance(name, str):
            raise RaceInputError(f"workload must be a name; workloads: {', '.join(WORKLOADS)}")
        try:
            concurrency = CONCURRENCY.parse(_text("concurrency", concurrency_raw))
            run = resolve(mode.name, name, query, runs=own(mode))
        except ParamError as error:
            raise RaceInputError(error.message) from None
        except Refused as refused:
            raise RaceInputError(refused.message) from None
        return cls(run, concurrency)

    def command(self, base_url: str) -> list[str]:
        """The load generator's command line (run from the project root)."""
        run = self.run
        argv = [sys.executable, "-m", "lab.race", "--url", base_url, "--mode", run.mode]
        if MODES[run.mode].runs(run.workload):
            # One second of warm-up load: a CPU that idled runs the solo request
            # (the `t` every ideal is built from) slower than it runs the race.
            argv += ["--workload", run.workload, "--warmup", str(PAGE_WARMUP_S)]
        for name, value in run.params.items():
            argv += ["-p", f"{name}={_arg(value)}"]
        return [*argv, "-c", str(self.concurrency)]

    def describe(self) -> dict[str, Any]:
        run = self.run
        return {"mode": run.mode, "workload": run.workload, "params": run.params, "concurrency": self.concurrency}


async def run_load_generator(argv: list[str], relay: Callable[[str], Awaitable[None]]) -> None:
    """Run the load generator, handing each JSON line to `relay` as it arrives.

    Whatever happens -- the race ends, `relay` fails because the page left,
    or this task is cancelled (a disconnect, or server shutdown: asyncio.run
    cancels every task) -- the process is gone when this returns.
    """
    try:
        # In the server's process group, so whatever stops the group stops it too.
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=MAX_LINE_BYTES,
        )
    except OSError as error:
        raise LoadGeneratorError(f"could not start the load generator: {error.strerror or error}") from None
    assert process.stdout is not None and process.stderr is not None
    stderr = asyncio.ensure_future(_tail(process.stderr))
    finished = False
    try:
        async for raw in process.stdout:
            line = raw.decode("utf-8", errors="replace").strip()
            try:
                event = json.loads(line)
            except ValueError:
                log.warning("load generator printed a non-JSON line: %.200s", line)
                continue
            if not isinstance(event, dict) or "event" not in event:
                continue
            finished = finished or event["event"] in ("done", "error")
            await relay(line)
        code = await process.wait()
        if not finished:
            why = (await stderr).strip().splitlines()
            raise LoadGeneratorError(
                f"the load generator exited with status {code} before the race ended"
                + (f": {why[-1][:300]}" if why else "")
            )
    except ValueError:  # a line over MAX_LINE_BYTES
        raise LoadGeneratorError("the load generator printed an oversized line") from None
    finally:
        if process.returncode is None:
            process.kill()  # it keeps no state worth a graceful stop
            await process.wait()
        stderr.cancel()


async def _tail(stream: asyncio.StreamReader) -> str:
    """Read a stream to its end, keeping only the last STDERR_TAIL_BYTES."""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-STDERR_TAIL_BYTES:]
    return kept.decode("utf-8", errors="replace")


class RaceSocket(WebSocketHandler, HostCheckedHandler):
    """Runs the one race a connection asks for and streams its events back."""

    def initialize(self, services: Services) -> None:
        self.services = services
        self._race: asyncio.Task[None] | None = None

    @property
    def max_message_size(self) -> int:
        return MAX_FRAME_BYTES

    def check_origin(self, origin: str) -> bool:
        # Asked only of a page that is not this origin: it may start races if it
        # is on one of this server's names (another port of localhost, say).
        return self.services.hosts.allows_origin(origin)

    async def get(self, *args: Any, **kwargs: Any) -> None:
        # Tornado answers a bad handshake in plain text; check what it checks
        # first, so that these errors are JSON like every other.
        headers = self.request.headers
        if headers.get("Upgrade", "").lower() != "websocket":
            raise LabError(400, "/race is the lab page's WebSocket: open / in a browser, or connect a WebSocket client")
        if "upgrade" not in {part.strip().lower() for part in headers.get("Connection", "").split(",")}:
            raise LabError(400, 'a WebSocket handshake needs "Connection: Upgrade"')
        # Tornado 6.6's own cross-origin algorithm (Sec-Fetch-Site, then Origin
        # against Host, then check_origin), as WebSocketHandler.get runs it.
        if tornado_private.cross_origin(self):
            origin = headers.get("Origin", "")[:SHOWN]
            raise LabError(
                403,
                f"a page from {origin!r} may not start races here: open the page from this server "
                f"({self.services.hosts.describe()})",
            )
        if headers.get("Sec-WebSocket-Version") not in ("7", "8", "13"):
            raise LabError(426, "unsupported WebSocket version", headers={"Sec-WebSocket-Version": "13"})
        if not headers.get("Sec-WebSocket-Key"):
            raise LabError(400, "a WebSocket handshake needs a Sec-WebSocket-Key")
        await super().get(*args, **kwargs)

    def on_message(self, message: str | bytes) -> None:
        if self._race is not None:
            self.close(CLOSE_POLICY, "one race per connection")
            return
        try:
            request = RaceRequest.parse(message)
        except RaceInputError as error:
            self._refuse(str(error), error.code)
            return
        races = self.services.races
        if races:  # one at a time per server process: two races would measure each other
            self._refuse(BUSY)
            return
        # Kept, so on_close (and the server's shutdown) can cancel it, which
        # kills the load generator.
        self._race = race = asyncio.ensure_future(self._run(request))
        races.add(race)
        race.add_done_callback(self._ended)

    def _refuse(self, message: str, code: int = CLOSE_NORMAL) -> None:
        if self.ws_connection is not None and not self.ws_connection.is_closing():
            self.write_message({"event": "error", "message": message})
            # The reason, cut to fit a close frame (123 bytes of UTF-8 at most).
            self.close(code, message.encode()[:100].decode(errors="ignore"))

    async def _run(self, request: RaceRequest) -> None:
        command = request.command(self.services.base_url)
        log.info("race: %s", " ".join(command[1:]))
        try:
            await self.write_message({"event": "start", **request.describe()})
            await run_load_generator(command, self.write_message)
        except LoadGeneratorError as error:
            await self.write_message({"event": "error", "message": str(error)})

    def _ended(self, task: asyncio.Future[None]) -> None:
        self.services.races.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, WebSocketClosedError):  # the page left: not a failure
            log.error("race failed", exc_info=error)
        if self.ws_connection is not None:
            self.close(CLOSE_NORMAL)  # one race per connection: the race is over

    def on_close(self) -> None:
        if self._race is not None:
            self._race.cancel()


class RaceOptionsHandler(LabHandler):
    """GET /race/options: what the page may ask for beyond /workloads."""

    def get(self) -> None:
        self.write(
            {
                "modes": list(MODES),
                "concurrency": CONCURRENCY.describe(),
                "async_params": [param.describe() for param in ASYNC_PARAMS],
            }
        )


routes = [(r"/race", RaceSocket), (r"/race/options", RaceOptionsHandler)]
