"""Start a lab server for a bench run on a free loopback port, and always stop it with all it started."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from lab import ROOT, loopback
from lab.race.engine import get
from workloads import ml

SERVING = re.compile(r"serving on (http://[^/\s]+)/")


class ServerError(RuntimeError):
    """The server exited or did not become ready; the message carries its log's tail."""


def tree(pid: int) -> list[psutil.Process]:
    """A process and its descendants (a server's forked children, pools, workers); [] once it is gone."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


@dataclass
class Peaks:
    """The most a process tree had at once while it was watched (RSS summed over it, in bytes)."""

    processes: int = 0
    threads: int = 0
    rss: int = 0

    @property
    def rss_mb(self) -> float:
        return round(self.rss / 2**20, 1)


class TreeWatcher:
    """Samples a process tree every `interval` seconds between start() and stop(): its peaks.

    Sampling costs CPU on the machine being measured: a few times a second is plenty.
    """

    def __init__(self, processes: Callable[[], list[psutil.Process]], interval: float = 0.1) -> None:
        self.processes = processes
        self.interval = interval
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> Peaks:
        """The tree's processes, threads and RSS now."""
        now = Peaks()
        for process in self.processes():
            with contextlib.suppress(psutil.Error), process.oneshot():
                now.rss += process.memory_info().rss
                now.threads += process.num_threads()
                now.processes += 1
        return now

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tree-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            now, peaks = self.sample(), self.peaks
            peaks.processes = max(peaks.processes, now.processes)
            peaks.threads = max(peaks.threads, now.threads)
            peaks.rss = max(peaks.rss, now.rss)
            self._stop.wait(self.interval)

    def stop(self) -> Peaks:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.peaks

    def __enter__(self) -> TreeWatcher:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def log_tail(log_path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def all_serving(url: str) -> bool:
    """Every server process answers /stats (forked children come up one by one)."""
    try:
        with loopback.urlopen(f"{url}/stats", timeout=2) as reply:
            body = json.loads(reply.read())
    except (OSError, ValueError):
        return False
    return bool(len(body["processes"]) == body["server"]["processes"])


def _alive(pid: int) -> bool:
    """Running, not merely a zombie waiting to be reaped."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
    return members


def wait_ready(log_path: Path, pid: int, timeout: float = 120.0, *, address: re.Pattern[str] = SERVING,
               ready: Callable[[str], bool] = all_serving) -> str:  # fmt: skip
    """Base URL of the server `pid` logging to `log_path`, once `ready(url)`.

    The lab's socket is bound (and its URL logged) before the pools are warm, so
    the log line alone does not mean ready: /stats must list every process.
    Another server says where it listens in its own words (`address`, whose
    group 1 is the URL or host:port) and is ready by its own test.
    """
    deadline = time.monotonic() + timeout
    url = ""
    while True:
        if not _alive(pid):
            raise ServerError(f"server pid {pid} exited during start-up; its log ends:\n{log_tail(log_path)}")
        if not url:
            match = address.search(log_path.read_text(errors="replace")) if log_path.exists() else None
            found = match.group(1) if match else ""
            url = found if not found or found.startswith("http") else f"http://{found}"
        if url and ready(url):
            return url
        if time.monotonic() > deadline:
            raise ServerError(f"server pid {pid} not ready after {timeout:g} s; its log ends:\n{log_tail(log_path)}")
        time.sleep(0.1)


def stop_group(pgid: int, grace: float = 15.0, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM a process group, then SIGKILL whatever is left after `grace` seconds, and wait (a few seconds at
    most) until the kernel has torn it down.

    `reap` is called while waiting so that a leader which is our own child
    does not linger as a zombie (a zombie still counts as a group member for kill()).
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    if gone(lambda: group_members(pgid), grace, reap):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    gone(lambda: group_members(pgid), 5.0, reap)  # SIGKILL is not instant: a big process takes a while to end


def gone(members: Callable[[], Sequence[object]], timeout: float, reap: Callable[[], object] | None = None) -> bool:
    """Whether `members()` came back empty twice in a row, 0.1 s apart, within `timeout` seconds.

    Once is not enough: a scan lists the pids first, so a child forked during
    it (a master respawning a worker as it dies) can be missed by one scan.
    """
    deadline = time.monotonic() + timeout
    empty = 0
    while True:
        if reap is not None:
            reap()
        empty = empty + 1 if not members() else 0
        if empty == 2:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def stop_server(process: subprocess.Popen[bytes], grace: float) -> None:
    """Stop a server started in its own session, and everything in its process group; reap it."""
    # The session leader's pid is the group id, even after it has exited.
    stop_group(process.pid, grace, reap=process.poll)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def own_server(server_args: str, prefix: str, *, quiet: bool = False) -> Iterator[LocalServer]:
    """A server for this run from a bench tool's `--server-args`, logging to a temporary folder; stopped and
    its folder removed however the run ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        if not quiet:
            print(f"starting a server: server.py {server_args}".rstrip(), file=sys.stderr)
        with LocalServer(shlex.split(server_args), Path(tmp) / "server.log", quiet=quiet) as server:
            yield server


@contextlib.contextmanager
def lab_server(url: str | None, server_args: str, prefix: str, *, quiet: bool = False) -> Iterator[str]:
    """The base URL a bench tool measures: its `--url`, or a server's it starts from `--server-args` (own_server).
    `quiet`: nothing said, nor asked for it (the page's races: bench.race --jsonl, whose stderr stays empty)."""
    if url:  # (--url: bench/lib/args.py's base_url has stripped its trailing slash)
        if not quiet:
            say_if_lazy(url)
        yield url
        return
    with own_server(server_args, prefix, quiet=quiet) as server:
        yield server.url


@functools.cache  # once a run for each lab
def _say_lazy(which: str = "the labs this run starts are") -> None:
    print(f"note: {which} lazy about scikit-learn ({ml.LAZY_ENV}=1 or --lazy-ml): each worker's first predict or "
          "train includes loading it, about 2.5 s of CPU, and its timings show it", file=sys.stderr)  # fmt: skip


def say_if_lazy(url: str) -> None:
    """The same note for a running lab (--url) whose /stats says it is lazy; nothing if it cannot be asked (the
    tool says so itself, at its first request): engine.get answers whatever the reply, and never raises."""
    status, body, _, _ = get(f"{url}/stats", 5)
    server = body.get("server") if status == 200 and isinstance(body, dict) else None
    if isinstance(server, dict) and server.get("lazy_ml"):
        _say_lazy(f"the lab at {url} is")


class LocalServer:
    """`server.py --port 0` in its own session, so stopping it takes its whole process group. `quiet`: no note
    on stderr (a lazy lab's: _say_lazy)."""

    def __init__(self, flags: Sequence[str], log_path: Path, *, quiet: bool = False,
                 prefix: Sequence[str] = (), python: str = sys.executable) -> None:  # fmt: skip
        self.python = python  # another venv's (bench.gil_off: a lab with a GIL and one without)
        self.flags = ["--port", "0", "--no-access-log", *flags]
        self.prefix = list(prefix)  # a command the server's Python runs under (valgrind's: bench/lib/callgrind.py)
        self.log_path = log_path
        self.quiet = quiet
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 120.0) -> LocalServer:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*self.prefix, self.python, "server.py", *self.flags],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self.url = wait_ready(self.log_path, self.process.pid, timeout)
        except BaseException:
            self.stop()
            raise
        if not self.quiet and (ml.lazy() or "--lazy-ml" in self.flags):
            _say_lazy()
        return self

    @property
    def pid(self) -> int:
        """The server's process id (its Python's, or the prefix command's, which runs it in the same process)."""
        if self.process is None:
            raise RuntimeError("the server has not been started")
        return self.process.pid

    def stop(self, grace: float = 5.0) -> None:
        """Stop the server and everything in its process group; reap it.

        `grace` is short on purpose: a bench has no use for a blocked event
        loop finishing queued /blocking jobs after the race was called off.
        """
        if self.process is not None:
            stop_server(self.process, grace)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def floor_server(folder: Path, flags: Sequence[str] = (), name: str = "floor",
                 prefix: Sequence[str] = ()) -> Iterator[tuple[str, int]]:  # fmt: skip
    """The bare Tornado floor (bench/bare_server.py) on a free port, in its own session, logging to
    `folder`/`name`.log, its Python run under `prefix` if given; its (url, pid), stopped with its group however
    the run ends."""
    log_path = folder / f"{name}.log"
    argv = [*prefix, sys.executable, "-m", "bench.bare_server", "--port", "0", *flags]
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, cwd=ROOT,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    try:
        # It logs its address once it listens and its pools are warm.
        yield wait_ready(log_path, process.pid, 120, address=SERVING, ready=lambda url: True), process.pid
    finally:
        stop_server(process, 5.0)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its live descendants."""
    total = 0.0
    for process in tree(pid):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def own_cpu(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by these processes themselves, not their children."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total
