"""The servers a comparison runs: the lab, uWSGI and gunicorn, each started as a user starts it, always stopped.

A Setup is one configuration of one server and how the lab's ideal sees it
(the lab mode whose capacity model describes it: uWSGI's `--processes 2` is
"blocking" in two processes, gunicorn's gthread is "threading"). A Running
server is its process group, started from the project root in a session of
its own, its address read from its own log (every one binds port 0: the OS
picks), watched while a burst runs (peak processes, threads, RSS; uWSGI's
per-worker numbers from its stats socket, as uwsgitop reads them), and
stopped with its whole group however the run ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.lib.servers import SERVING, TreeWatcher, all_serving, gone, stop_server, tree, wait_ready
from lab import ROOT, loopback
from lab.machine import cpu_count
from lab.modes.contract import make_facts
from lab.modes.upstream import UPSTREAM_TRAITS

BIN = Path(sys.executable).parent
# How each server says where it listens, in its log.
ADDRESS = {
    "lab": SERVING,
    "uwsgi": re.compile(r"bound to TCP address (\S+)"),
    "gunicorn": re.compile(r"Listening at: (http://\S+)"),
}


@dataclass(frozen=True)
class Setup:
    """One configuration of one server, and how the lab's ideal sees it."""

    server: str  # "lab", "uwsgi" or "gunicorn"
    config: str  # as people name it: "-p 2", "sync -w 2", "--processes 2, /threading"
    argv: tuple[str, ...]  # its command line, run from the project root (binding port 0 where it binds)
    path: str  # where a workload's requests go: "/processing", "/wsgi"; "/async" for the lab's waits
    mode: str  # the lab mode whose capacity describes it (lab/modes/registry.py), for the ideal
    processes: int = 1
    threads: int = 1
    serves: frozenset[str] = frozenset({"cpu"})  # which loads it takes part in: "cpu", "io"
    ready_path: str = "/ping"  # a peer is ready once this answers (any HTTP status: a user's app may have no /ping)

    def url(self, base: str, workload: str, params: dict[str, str]) -> str:
        """One request of this load: the lab's /async takes only the upstream's delay."""
        name = "" if self.path == "/async" else f"/{workload}"
        query = urllib.parse.urlencode(params)
        return f"{base}{self.path}{name}" + (f"?{query}" if query else "")

    def facts(self, listed: list[dict[str, Any]]) -> dict[str, Any]:
        """A peer's facts as the ideal reads them (a lab server reports its own at /stats)."""
        server = {
            "cpu_count": cpu_count(),
            "processes": self.processes,
            "thread_pool": self.threads,
            "process_pool": 1,
            "gil_enabled": all(w.get("gil_enabled", True) for w in listed),
        }
        return make_facts(server, [*listed, UPSTREAM_TRAITS])


def lab(config: str, path: str, mode: str, *flags: str, serves: frozenset[str] = frozenset({"cpu"})) -> Setup:
    argv = (sys.executable, "server.py", "--port", "0", "--no-access-log", "--grace", "5", *flags)
    return Setup("lab", config, argv, path, mode, serves=serves)


def uwsgi(ini: str, config: str, mode: str, processes: int, threads: int = 1, *, serves: frozenset[str]) -> Setup:
    # Both always given: a flag after --ini overrides the file's value, and threads=1 must win over an ini's 10.
    argv = [str(BIN / "uwsgi"), "--ini", f"peers/{ini}", "--http-socket", "127.0.0.1:0",
            "--processes", str(processes), "--threads", str(threads)]  # fmt: skip
    return Setup("uwsgi", config, tuple(argv), "/wsgi", mode, processes, threads, serves)


def gunicorn(conf: str, config: str, mode: str, workers: int, threads: int = 1, *, serves: frozenset[str]) -> Setup:
    # As for uWSGI: flags override the config file, so both are always given.
    argv = [str(BIN / "gunicorn"), "-c", f"peers/{conf}", "--bind", "127.0.0.1:0",
            "-w", str(workers), "--threads", str(threads)]  # fmt: skip
    return Setup("gunicorn", config, tuple(argv), "/wsgi", mode, workers, threads, serves)


@dataclass
class Running:
    setup: Setup
    process: subprocess.Popen[bytes]
    log_path: Path
    url: str = ""
    stats_socket: Path | None = None  # uWSGI's, for uwsgitop's view

    @classmethod
    def start(cls, setup: Setup, folder: Path, upstream: str, timeout: float = 120.0) -> Running:
        """Start `setup` from the project root, logging to `folder`; returns once it answers /ping."""
        name = re.sub(r"[^a-z0-9]+", "-", f"{setup.server} {setup.config}".lower()).strip("-")
        log_path = folder / f"{name}.log"
        argv = list(setup.argv)
        stats = None
        if setup.server == "uwsgi":
            # A socket of this run's own, not the ini's 127.0.0.1:9191, in a short folder: a unix socket's path
            # must fit in 108 bytes, which a results folder under pytest's tmp_path does not.
            stats = Path(tempfile.mkdtemp(prefix="lab-uwsgi-")) / "stats.sock"
            argv += ["--stats", str(stats)]
        if setup.server == "lab":
            argv += ["--upstream", upstream]
        env = {**os.environ, "LAB_UPSTREAM": upstream}
        try:
            with log_path.open("wb") as log:
                process = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True, env=env)  # fmt: skip
        except BaseException:
            if stats is not None:
                shutil.rmtree(stats.parent, ignore_errors=True)
            raise
        running = cls(setup, process, log_path, stats_socket=stats)
        try:
            # Every server process of a forked lab; a peer once it answers at all, and uWSGI once its stats
            # server, which starts after the workers, answers too: its socket's file exists from bind(), a moment
            # before listen(), and a read in between is refused.
            ready = all_serving if setup.server == "lab" else lambda url: _answers(f"{url}{setup.ready_path}")
            if stats is not None:
                ready = lambda url: _answers(f"{url}{setup.ready_path}") and uwsgi_stats(stats) is not None  # noqa: E731
            running.url = wait_ready(log_path, process.pid, timeout, address=ADDRESS[setup.server], ready=ready)
        except BaseException:
            running.stop()
            raise
        return running

    def tree(self) -> list[psutil.Process]:
        """The server's process and its descendants (master and workers; forked children and pools)."""
        return tree(self.process.pid)

    def group(self) -> list[psutil.Process]:
        """The server's live processes, its whole session: what must be gone once it is stopped."""
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if os.getsid(process.pid) == self.process.pid and process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
        return found

    def watch(self) -> TreeWatcher:
        """A sampler of this server's peak processes, threads and RSS, to start and stop around a burst."""
        return TreeWatcher(self.tree)

    def stop(self) -> list[int]:
        """Stop the whole group (SIGTERM, then SIGKILL); the pids still alive after that, if any."""
        stop_server(self.process, 15.0)
        if self.stats_socket is not None:
            shutil.rmtree(self.stats_socket.parent, ignore_errors=True)
        # stop_group waited for the process group; a member of the session in another group gets the same bounded
        # wait before it is reported left behind.
        return [] if gone(self.group, 5.0) else [p.pid for p in self.group()]


def _answers(url: str) -> bool:
    """The server answers HTTP at `url`, whatever the status (an HTTPError is an answer too)."""
    try:
        with loopback.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def uwsgi_stats(path: Path) -> dict[str, Any] | None:
    """What uwsgitop reads: uWSGI's stats server's JSON (per worker: id, pid, requests, status...)."""
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(str(path))
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        doc: dict[str, Any] = json.loads(b"".join(chunks))
        return doc
    except (OSError, ValueError):
        return None


class WorkerView:
    """uwsgitop's view of a burst: per uWSGI worker, the requests it served and how busy it was.

    Both come from uWSGI's own accounting (the stats socket's `requests` and
    `running_time`, uwsgitop's REQ and RunT), read as the burst starts and
    once it is over, not sampled: a sample every so often misses a worker
    whose requests are short. A worker counts a request *after* its answer
    has left (uWSGI's uwsgi_close_request), so the closing reading waits
    until no worker is busy.
    """

    SETTLE_S = 3.0  # the longest the closing reading waits for the workers to finish their accounting

    def __init__(self, path: Path) -> None:
        self.path = path
        self.before: dict[int, dict[str, Any]] = {}
        self.after: dict[int, dict[str, Any]] = {}
        self._started = 0.0
        self._seconds = 0.0
        self._stopped = False

    def _read(self, patience: float = 0.0) -> dict[int, dict[str, Any]] | None:
        """The workers as the stats server lists them; asked again for up to `patience` s while it does not answer
        (its master is one process, which a loaded machine can keep off a core for seconds); None if it never did."""
        deadline = time.monotonic() + patience
        while (doc := uwsgi_stats(self.path)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return None if doc is None else {int(w["id"]): w for w in doc.get("workers", [])}

    def start(self) -> None:
        self.before = self._read(self.SETTLE_S) or {}
        self._started = time.monotonic()

    def stop(self) -> None:
        if self._stopped:
            return  # stopped already: the burst's numbers stay as they were
        self._stopped = True
        self._seconds = time.monotonic() - self._started
        deadline = time.monotonic() + self.SETTLE_S
        workers = self._read(self.SETTLE_S) or {}
        while any(w.get("status") == "busy" for w in workers.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
            workers = self._read() or workers  # (a reading that failed leaves the last one standing)
        self.after = workers

    def rows(self) -> list[dict[str, Any]]:
        """Per worker: id, pid, requests during the burst, and its busy share.

        Busy: the time its requests ran (all its cores together: threads, or
        gevent's async slots) over the burst's length times its cores, so 1.0
        is every core in a request throughout.
        """

        def delta(wid: int, key: str) -> int:
            return int(self.after[wid].get(key, 0)) - int(self.before.get(wid, {}).get(key, 0))

        return [
            {
                "worker": wid,
                "pid": int(worker["pid"]),
                "requests": delta(wid, "requests"),
                "busy": round(
                    delta(wid, "running_time") / 1e6 / (self._seconds * max(1, len(worker.get("cores", [])))), 2
                )
                if self._seconds > 0
                else None,
            }
            for wid, worker in sorted(self.after.items())
        ]
