"""The soak's line to the lab: every request goes through here and into the ledger, nothing is sent unrecorded."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bench.lib.soak import client
from bench.lib.soak.ledger import Ledger, Record


@dataclass
class Link:
    """The lab at `base`; `modes` names the first path segments that are modes (set once /modes is read)."""

    base: str
    timeout: float
    ledger: Ledger = field(default_factory=Ledger)
    modes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        parts = urlsplit(self.base)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{self.base!r}: the soak speaks plain http://HOST:PORT")
        self.host = parts.hostname
        self.port = parts.port or 80

    def mode_of(self, target: str) -> str | None:
        first = target.split("?", 1)[0].strip("/").split("/")[0]
        return first if first in self.modes else None

    async def send(self, kind: str, target: str, *, fault: int | None = None, allowed: float | None = None,
                   hang_up_after: float | None = None, half: bool = False) -> tuple[client.Answer, Record]:  # fmt: skip
        """GET `target`, recorded under `kind` (and the fault that sent it)."""
        answer = await client.get(self.host, self.port, target, allowed or self.timeout, hang_up_after=hang_up_after,
                                  half=half)  # fmt: skip
        return answer, self.ledger.add(kind, target, self.mode_of(target), answer, fault)

    async def race(self, message: dict[str, Any], allowed: float, *, fault: int | None = None,
                   hang_up_after: float | None = None) -> Record:  # fmt: skip
        """The page's race (`hang_up_after` s: abandoned mid-way), recorded as one request to /race."""
        answer = await client.race(self.host, self.port, message, allowed, hang_up_after=hang_up_after)
        return self.ledger.add("race", "/race", message.get("mode"), answer, fault)

    async def json(self, kind: str, target: str) -> Any:
        """The JSON body of a 200 answer to `target`; RuntimeError otherwise (the lab is not answering)."""
        answer, _ = await self.send(kind, target)
        body = answer.json()
        if answer.status != 200 or body is None:
            raise RuntimeError(f"{self.base}{target} answered {answer.status or answer.error}: is this a lab server?")
        return body

    async def stats(self, kind: str = "sample") -> dict[str, Any]:
        body: dict[str, Any] = await self.json(kind, "/stats")
        return body

    async def stats_soon(self, kind: str, attempts: int = 20) -> dict[str, Any]:
        """/stats, asked again for a while if a server process is restarting (a killed child's connections)."""
        for _ in range(attempts - 1):
            try:
                return await self.stats(kind)
            except RuntimeError:
                await asyncio.sleep(0.5)
        return await self.stats(kind)
