"""A PostgreSQL cluster of the test session's own: initdb in a temporary directory, a Unix socket there, no TCP.

Debian's `postgresql` package provides the programs (.ci/run installs it:
scripts/system-deps.sh postgresql). As root the cluster runs as the
`postgres` user (PostgreSQL refuses to run as root). Every cluster started
is stopped and its directory removed, however the tests end; none found
running is ever used.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL = "apt-get install -y postgresql (or: scripts/system-deps.sh postgresql)"


def programs() -> Path | None:
    """The folder of initdb and pg_ctl (the newest Debian install), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


class PostgresCluster:
    """initdb, start, stop (and start again) a cluster in `folder`, reached at `url` over its socket."""

    def __init__(self, folder: Path, bin_dir: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.socket = folder / "socket"
        self.bin = bin_dir
        self.url = f"postgresql://lab@/lab?host={self.socket}"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *argv: str) -> None:
        subprocess.run([*self._as, *argv], check=True, capture_output=True, timeout=120)

    def create(self) -> PostgresCluster:
        self.socket.mkdir(parents=True)
        if self._as:
            shutil.chown(self.folder, "postgres")
            shutil.chown(self.socket, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "lab", "--auth=trust", "-E", "UTF8")
        return self

    def start(self) -> None:
        options = f"-k {self.socket} -c listen_addresses='' -c max_connections=300 -c fsync=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"),
                  "-w", "start")  # fmt: skip
        self._run(str(self.bin / "createdb"), "-h", str(self.socket), "-U", "lab", "lab")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        options = f"-k {self.socket} -c listen_addresses='' -c max_connections=300 -c fsync=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"),
                  "-w", "start")  # fmt: skip


def cluster() -> Iterator[PostgresCluster]:
    """A fresh cluster for as long as the caller holds it; skipped, naming the command, where none can be had."""
    bin_dir = programs()
    if bin_dir is None:
        pytest.skip(f"no PostgreSQL here: {INSTALL}")
    folder = Path(tempfile.mkdtemp(prefix="lab-pg-realreq-"))
    pg = PostgresCluster(folder, bin_dir)
    try:
        pg.create().start()
        yield pg
    finally:
        try:
            pg.stop()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
