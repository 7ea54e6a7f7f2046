"""The flags the bench commands share, each declared once (a `Flag`: its names, type, default, metavar).

A command adds the ones it takes, each with its own help where its meaning
differs, so adding a flag to several commands is a line in each; how a
command is put together and how its run ends is bench/lib/command.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lab.settings import param_pair


def base_url(text: str) -> str:
    """argparse type for --url: the base URL without its trailing slash, which every path is joined to."""
    return text.rstrip("/")


class Flag:
    """One flag as several commands take it: its names and argparse settings; each command may add its help."""

    def __init__(self, *names: str, **settings: Any) -> None:
        self.names = names
        self.settings = settings

    def add(self, parser: argparse.ArgumentParser, **changes: Any) -> None:
        """Add the flag to `parser`, with `changes` (help, default...) over its own settings."""
        parser.add_argument(*self.names, **(self.settings | changes))


URL = Flag("--url", type=base_url, help="base URL of a running lab server (default: start one for this run)")
SERVER_ARGS = Flag("--server-args", default="", metavar="ARGS")
WORKLOAD = Flag("--workload", default="count")
PARAM = Flag("--param", "-p", action="append", type=param_pair, default=[], metavar="NAME=VALUE")
CONCURRENCY = Flag("-c", "--concurrency", type=int, default=10)
REPS = Flag("-r", "--reps", type=int, default=1)
SOLO_RUNS = Flag("--solo-runs", type=int, default=3, metavar="N")
WARMUP = Flag("--warmup", type=float, metavar="S")
OUT = Flag("--out", type=Path, metavar="DIR")
NO_FILES = Flag("--no-files", action="store_true", help="print the table only")
ROUNDS = Flag("--rounds", type=int, metavar="N")
TIMEOUT = Flag("--timeout", type=float, default=60.0, metavar="S")
# A Locust crowd's (bench.load, bench.seed): its size and how often its table prints a row.
USERS = Flag("--users", type=int, default=15, help="simulated users (default: 15)")
EVERY = Flag("--every", type=float, default=3.0, help="seconds between table rows (default: 3)")
