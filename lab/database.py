"""The page workload's database at start-up: the embedded SQLite file, or a check of --database's PostgreSQL.

Runs in the parent, before any fork: the SQLite file is created and seeded
in a temporary directory (removed when the server stops) and its URL given
to every process as if it were --database; a PostgreSQL URL is connected to
once, its table created and seeded, and the connection closed, so that a
database that refuses ends the server at start-up (exit 2, one line), not
at its first request. The processes that query open their own connections
(workloads/page/database.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
from urllib.parse import urlsplit, urlunsplit

from lab.scratch import scratch_dir
from workloads.page.database import POSTGRES, SQLITE
from workloads.page.seed import SEED_ROWS
from workloads.page.sqlite import create

log = logging.getLogger(__name__)


def database_url(text: str) -> str:
    """--database's value: a postgresql:// URL that psycopg can parse (argparse's type)."""
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415 -- only a server given --database needs psycopg

    if not text.startswith(POSTGRES):
        raise argparse.ArgumentTypeError(f"{shown(text)!r} is not a postgresql://USER@HOST:PORT/DATABASE URL")
    try:
        conninfo_to_dict(text)
    except Exception as error:  # psycopg.ProgrammingError, or whatever its parser raises: the URL is bad
        why = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise argparse.ArgumentTypeError(f"{shown(text)!r} does not parse as a PostgreSQL URL: {why}") from None
    return text


def shown(url: str) -> str:
    """`url` as a log line or an error may show it: without its password, clipped."""
    parts = urlsplit(url[:300])
    if parts.password is not None:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def preflight(url: str) -> str | None:
    """Why the server cannot use the PostgreSQL at `url`, in one line, or None (its table then exists, seeded)."""
    from psycopg import Error  # noqa: PLC0415

    from workloads.page.postgres import seed  # noqa: PLC0415

    try:
        seed(url, SEED_ROWS)
    except Error as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return f"--database {shown(url)}: cannot use it: {first}"
    return None


PREFIX = "lab-page-"


class EmbeddedDatabase:
    """A SQLite file seeded in a temporary directory of its own (lab/scratch.py), removed by stop()."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = os.path.join(folder, "page.sqlite3")
        self.url = f"{SQLITE}{self.path}"

    @classmethod
    def start(cls) -> EmbeddedDatabase:
        embedded = cls(scratch_dir(PREFIX))
        create(embedded.path, SEED_ROWS)
        log.info("embedded database: SQLite at %s, %d rows", embedded.path, SEED_ROWS)
        return embedded

    def stop(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
