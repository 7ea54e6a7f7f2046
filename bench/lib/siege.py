"""siege as the lab runs it: its settings files, and what it prints read back (siege.sh's steps, bench.compare)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

SIEGE_KEYS = ("transactions", "elapsed_time", "response_time", "shortest_transaction", "longest_transaction")


# siege's settings for every run of the lab's: its own rc file (-R), so that a user's
# ~/.siege/siege.conf cannot change what is measured (siege.sh's `siegerc` step writes it).
SIEGERC = """\
# Written by the lab's bench; siege runs with this file (-R), not ~/.siege/siege.conf.
json_output = true
parser = false
delay = 0
connection = close
protocol = HTTP/1.1
cache = false
logging = false
show-logfile = false
verbose = false
color = off
timeout = 600
failures = 1024
"""

# siege.sh's: the same settings, with siege's own line for every request on stdout (verbose) and its
# classic summary on stderr; Debian's siegerc turns JSON on, and no flag turns it off (REFERENCE_FIGURES).
SIEGERC_LINES = SIEGERC.replace("json_output = true", "json_output = false").replace(
    "verbose = false", "verbose = true"
)


class StepError(RuntimeError):
    """A step cannot go on; its message is shown to the user as is."""


def parse_siege(text: str) -> dict[str, Any]:
    """The JSON object in siege's stdout, whatever precedes or follows it.

    siege's first run on a machine prints "New configuration template added
    to ..." before the JSON; other versions may add lines after it.
    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict) and all(key in value for key in SIEGE_KEYS):
            return value
        start = text.find("{", start + 1)
    raise StepError(f"no siege JSON summary found in its output ({len(text)} characters)")


@dataclass(frozen=True)
class Line:
    """One request as siege printed it: `HTTP/1.1 200     4.54 secs:      35 bytes ==> GET  /blocking`."""

    text: str
    status: int
    seconds: float


LINE = re.compile(r"^HTTP/\d(?:\.\d)?\s+(\d{3})\s+([0-9.]+)\s+secs:")


def request_lines(text: str) -> list[Line]:
    """siege's per-request lines in its stdout, in the order it printed them (the order they came back)."""
    found = (LINE.match(raw.strip()) for raw in text.splitlines())
    return [Line(m.string, int(m.group(1)), float(m.group(2))) for m in found if m]


# "Elapsed time:\t\t        4.54 secs": a label, a number, maybe a unit.
SUMMARY_LINE = re.compile(r"^([A-Z][A-Za-z ]+):\s+(-?[0-9.]+)")


def parse_summary(text: str) -> dict[str, Any]:
    """siege's classic summary (its stderr without JSON output) under the keys of its JSON one."""
    found = (SUMMARY_LINE.match(raw.strip()) for raw in text.splitlines())
    summary: dict[str, Any] = {}
    for m in found:
        if m:
            value = float(m.group(2))
            summary[m.group(1).strip().lower().replace(" ", "_")] = int(value) if value.is_integer() else value
    if not all(key in summary for key in SIEGE_KEYS):
        raise StepError(f"no siege summary found in its output ({len(text)} characters)")
    return summary
