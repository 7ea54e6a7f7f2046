"""Every request the soak sends, and what became of it: answered, a counted error, or unaccounted for.

Each request is a `Record`. Once the run is over, `classify` gives each an
outcome, using the faults' windows (a fault declares the results it is
designed to cause, its `Effect`s, from when it starts until the lab has
recovered from it):

    ok           answered with a status below 400 (a race: its `done` event)
    expected     an error status a fault was designed to cause, in its window (the burst's 503s, the 504), or
                 a race refused as busy while the disconnect fault's abandoned race was still being stopped
    unexpected   any other error status, or a race that ended with an `error` event
    aborted      the soak hung up on purpose (the disconnect fault): a counted error
    cut          no answer, in the window of a fault that cuts connections (a killed server process)
    unaccounted  no answer and nothing to explain it (a timeout, a reset out of the blue)

so that sent = answered (ok + expected + unexpected) + counted errors
(aborted + cut) + unaccounted, and a healthy lab leaves `unaccounted` at 0.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.lib.soak.client import ABORTED, RACE_ERROR, Answer

OUTCOMES = ("ok", "expected", "unexpected", "aborted", "cut", "unaccounted")
ANSWERED = ("ok", "expected", "unexpected")
COUNTED_ERRORS = ("aborted", "cut")
# How long after a fault has ended its effects may still arrive (an answer already on its way).
GRACE_S = 2.0
# The start of the lab's refusal of a race while another runs on the same server process (handlers/race.py).
RACE_BUSY = "busy:"


@dataclass
class Record:
    """One request: what it asked, when, what it got; its outcome once classified."""

    seq: int
    kind: str  # mix, ping, sample, race, warm, calibrate, fault
    route: str  # the path without its query ("/processing/count"), "/race" for the page's race
    mode: str | None
    sent: float
    received: float
    status: int | None
    error: str | None
    fault: int | None = None  # the fault that sent it
    note: str = ""  # the start of an error answer's body
    outcome: str = ""
    because: int | None = None  # the fault whose window explains it


@dataclass(frozen=True)
class Effect:
    """A result a fault is designed to cause: a status (None: no answer at all), on one mode's routes or any,
    to any request in its window or only to its own.

    With `race_refusal` the status is not looked at: the effect is a race the lab answered with an `error`
    event whose message starts with that, sent no later than `sent_by` (a time.time())."""

    status: int | None
    mode: str | None = None
    own_only: bool = False
    race_refusal: str | None = None
    sent_by: float = math.inf

    def explains(self, record: Record, fault: int) -> bool:
        if (self.own_only and record.fault != fault) or (self.mode is not None and record.mode != self.mode):
            return False
        if self.race_refusal is not None:
            return (record.error == RACE_ERROR and record.sent <= self.sent_by
                    and event_message(record.note).startswith(self.race_refusal))  # fmt: skip
        # (A race that ended with an error event was answered: it is no silence of the kind None stands for.)
        return record.status == self.status and not (self.status is None and record.error == RACE_ERROR)


@dataclass(frozen=True)
class Window:
    """Fault number `fault` was under way from `start` to `end`, designed to cause `effects`."""

    fault: int
    start: float
    end: float
    effects: tuple[Effect, ...]

    def overlaps(self, record: Record) -> bool:
        return record.sent <= self.end + GRACE_S and record.received >= self.start


def route_of(target: str) -> str:
    return target.split("?", 1)[0]


def event_message(note: str) -> str:
    """The message of the race event a record's note holds ("" if it holds none whole)."""
    try:
        event = json.loads(note)
    except ValueError:
        return ""
    message = event.get("message") if isinstance(event, dict) else None
    return message if isinstance(message, str) else ""


@dataclass
class Ledger:
    """The records, in the order the requests were sent."""

    records: list[Record] = field(default_factory=list)

    def add(self, kind: str, target: str, mode: str | None, answer: Answer, fault: int | None = None) -> Record:
        note = ""
        if (answer.status is not None and answer.status >= 400) or (answer.error or "").startswith("race"):
            note = answer.body[:300].decode(errors="replace")
        record = Record(len(self.records), kind, route_of(target), mode, answer.sent, answer.received, answer.status,
                        answer.error, fault, note)  # fmt: skip
        self.records.append(record)
        return record

    def counts(self) -> Counter[str]:
        """Outcomes so far, classified as if no fault explained anything (for the progress line)."""
        return Counter(_bare(record) for record in self.records)


def _bare(record: Record) -> str:
    if record.status is not None:
        return "ok" if record.status < 400 else "error status"
    return "aborted" if record.error == ABORTED else "no answer"


def classify(records: Iterable[Record], windows: Sequence[Window]) -> None:
    """Give every record its outcome (and the fault that explains it, if one does)."""
    for record in records:
        record.outcome, record.because = _outcome(record, windows)


def _outcome(record: Record, windows: Sequence[Window]) -> tuple[str, int | None]:
    if record.status is not None and record.status < 400:
        return "ok", None
    if record.error == ABORTED:
        return "aborted", record.fault
    for window in windows:
        if window.overlaps(record) and any(effect.explains(record, window.fault) for effect in window.effects):
            # (A race's error event is explained only as a refusal: Effect(None) stands for no answer at all.)
            answered = record.status is not None or record.error == RACE_ERROR
            return ("expected" if answered else "cut"), window.fault
    if record.status is not None or (record.error or "").startswith("race"):
        return "unexpected", None
    return "unaccounted", None


def tally(records: Sequence[Record]) -> dict[str, int]:
    """sent, answered, counted errors, unaccounted, and each outcome's count."""
    outcomes = Counter(record.outcome for record in records)
    found = {outcome: outcomes.get(outcome, 0) for outcome in OUTCOMES}
    return {
        "sent": len(records),
        "answered": sum(found[o] for o in ANSWERED),
        "counted_errors": sum(found[o] for o in COUNTED_ERRORS),
        **found,
    }


def what(record: Record) -> str:
    """A record's result in one word: its status, or its error's name."""
    return str(record.status) if record.status is not None else record.error or "?"


def by_route(records: Iterable[Record]) -> dict[str, dict[str, int]]:
    """Per route (and kind of request), how many got each status or error."""
    found: dict[str, Counter[str]] = {}
    for record in records:
        found.setdefault(f"{record.kind} {record.route}", Counter())[what(record)] += 1
    return {route: dict(sorted(counts.items())) for route, counts in sorted(found.items())}


def unexpected(records: Iterable[Record]) -> dict[str, int]:
    """Unexpected answers by status (or race error)."""
    return dict(Counter(what(record) for record in records if record.outcome == "unexpected"))


def shown(record: Record) -> dict[str, Any]:
    """A record as soak.json lists it (a fault's requests, the unexpected ones)."""
    return {"route": record.route, "kind": record.kind, "sent": round(record.sent, 3),
            "ms": round(1000 * (record.received - record.sent), 1), "got": what(record), "outcome": record.outcome,
            **({"note": record.note} if record.note else {})}  # fmt: skip


def write_csv(path: Path, records: Iterable[Record]) -> Path:
    """Every request, one line each: when, how long, what it got and its outcome."""
    with path.open("w", newline="") as file:
        out = csv.writer(file)
        out.writerow(["seq", "kind", "route", "mode", "sent_s", "ms", "got", "fault", "outcome", "because"])
        for r in records:
            out.writerow([r.seq, r.kind, r.route, r.mode or "", f"{r.sent:.3f}", f"{1000 * (r.received - r.sent):.1f}",
                          what(r), "" if r.fault is None else r.fault, r.outcome,
                          "" if r.because is None else r.because])  # fmt: skip
    return path
