"""siege as the lab runs it: its settings file, and its JSON summary read back (siege.sh's steps, bench.compare)."""

from __future__ import annotations

import json
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
