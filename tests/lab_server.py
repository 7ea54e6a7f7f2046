"""Run server.py as a subprocess on a free port and always reap it (and all it started)."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from threading import Barrier
from typing import Any

import psutil

from bench.lib.servers import SERVING, all_serving
from lab import ROOT, loopback
from lab.database import PREFIX as PAGE_PREFIX
from lab.modes.distributed.cluster import SCRATCH_PREFIX as DASK_PREFIX
from lab.scratch import sweep
from tests.procs import STALL_S, Watch, wait_for

# The folders a server makes in the temporary directory, each named for its pid (lab/scratch.py).
SCRATCH_PREFIXES = (PAGE_PREFIX, DASK_PREFIX)

# `python -c LIMITED N ARGV...`: RLIMIT_NOFILE N (soft and hard), then exec python ARGV (the same process).
LIMITED = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)


# Linux's SO_TIMESTAMPNS, which Python 3.11's socket module does not name: with it set, each read of a socket
# also says when the kernel took in the data it returns.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


class Reply:
    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        body: bytes,
        sent: float,
        received: float,
        *,
        arrived: float | None = None,
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.sent = sent
        self.received = received  # when this process had read it all (its thread may have woken late)
        self.arrived = arrived  # when the kernel took in its last byte (sent_stamped), however late the reader

    def json(self) -> Any:
        return json.loads(self.body)


def get(url: str, timeout: float = 60.0, method: str = "GET") -> Reply:
    request = urllib.request.Request(url, method=method)
    sent = time.time()
    try:
        with loopback.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, dict(response.headers), response.read(), sent, time.time())
    except urllib.error.HTTPError as error:
        return Reply(error.code, dict(error.headers), error.read(), sent, time.time())


def sent(url: str, pool: ThreadPoolExecutor, timeout: float = 60.0) -> Future[Reply]:
    """GET `url`, sent from this thread now; its reply read in `pool`.

    When this returns the request is in the kernel's hands, its connection
    queued ahead of any made after it, however late a busy machine runs the
    pool's thread: a test that sends a job, then a probe, knows their order.
    """
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    started = time.time()

    def reply() -> Reply:
        with contextlib.closing(connection):
            response = connection.getresponse()
            return Reply(response.status, dict(response.headers), response.read(), started, time.time())

    try:
        # As get() asks: urllib's requests say Connection: close.
        connection.request("GET", f"{parts.path}?{parts.query}" if parts.query else parts.path,
                           headers={"Connection": "close"})  # fmt: skip
        return pool.submit(reply)
    except BaseException:
        connection.close()
        raise


class _Received:
    """A reply read off the wire, as the socket http.client parses it from."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.data)


def sent_stamped(url: str, pool: ThreadPoolExecutor, timeout: float = 60.0) -> Future[Reply]:
    """sent(), and the reply's `arrived`: the kernel's time stamp of its last byte's arrival.

    On loopback the kernel stamps a segment as the server's write hands it
    over, not when the client's thread wakes to read it, which on a busy
    machine can be a second later: `arrived` says when the server answered.
    """
    parts = urllib.parse.urlsplit(url)
    target = f"{parts.path}?{parts.query}" if parts.query else parts.path
    started = time.time()
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout)

    def reply() -> Reply:
        data, arrived = b"", None
        with sock:
            while chunk := _read_stamped(sock):
                data += chunk[0]
                arrived = chunk[1] if chunk[1] is not None else arrived
        assert arrived is not None, "the kernel stamped none of the reply (SO_TIMESTAMPNS)"
        response = http.client.HTTPResponse(_Received(data))  # type: ignore[arg-type]
        response.begin()
        return Reply(response.status, dict(response.headers), response.read(), started, time.time(), arrived=arrived)

    try:
        # Set before the request goes: the kernel stamps only what arrives while some socket asks for it.
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
        return pool.submit(reply)
    except BaseException:
        sock.close()
        raise


def _read_stamped(sock: socket.socket) -> tuple[bytes, float | None] | None:
    """One read: its bytes and the kernel's arrival stamp of the last of them; None at the end of the stream."""
    data, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(16))
    if not data:
        return None
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = struct.unpack("qq", raw[:16])  # a struct timespec (64-bit Linux)
            return data, seconds + nanoseconds / 1e9
    return data, None


def copies(url: str, n: int) -> list[str]:
    """n distinct URLs for the same request (the `_` parameter is ignored by the server)."""
    joiner = "&" if "?" in url else "?"
    return [f"{url}{joiner}_={i}" for i in range(n)]


def get_many(urls: Sequence[str], timeout: float = 60.0) -> list[Reply]:
    """Send every request at the same instant (a barrier releases them together)."""
    barrier = Barrier(len(urls))

    def one(url: str) -> Reply:
        barrier.wait()
        return get(url, timeout)

    with ThreadPoolExecutor(len(urls)) as pool:
        return list(pool.map(one, urls))


def probe_during(
    job_urls: Sequence[str], probe_url: str, running: Callable[[], bool] | None = None
) -> tuple[list[Reply], Reply]:
    """Start the jobs, send one probe once they run; both replies.

    `running` tells when they do (poll /stats); without it (a blocked server
    cannot answer), the probe goes 0.8 s after the jobs were sent, ample for
    an idle local server to begin them on a stalled host too (the jobs must
    outlast that by far).
    """
    with ThreadPoolExecutor(len(job_urls)) as pool:
        jobs = [sent(url, pool) for url in job_urls]
        if running is None:
            time.sleep(0.8)
        else:
            assert wait_for(running)
        probe = get(probe_url)
        return [job.result() for job in jobs], probe


def pool_stats(url: str, mode: str) -> dict[str, Any]:
    """The first server process's numbers for one pool, from /stats."""
    pool: dict[str, Any] = get(f"{url}/stats").json()["processes"][0]["pools"][mode]
    return pool


def ping_while_pool_busy(url: str, mode: str, jobs: int) -> tuple[list[Reply], Reply]:
    """Keep `jobs` 3-second sleeps running in `mode`'s pool; ping once they all run."""
    return probe_during(
        copies(f"{url}/{mode}/sleep?seconds=3", jobs),
        f"{url}/ping",
        running=lambda: pool_stats(url, mode)["running"] == jobs,
    )


class LabServer:
    """server.py in its own session, so teardown can kill its whole process group."""

    def __init__(
        self, args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None, open_files: int | None = None
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.env = {**os.environ, **env} if env else None
        self.open_files = open_files  # its RLIMIT_NOFILE, soft and hard (it raises the soft one to the hard)
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.watch = Watch()

    def start(self, ready_timeout: float = 90.0, *, ready: bool = True) -> LabServer:
        """Start the server; with `ready`, wait until every server process serves."""
        self._log = self.log_path.open("wb")
        # With open_files, a launcher sets the limit, then becomes the server (exec: the same pid).
        limited = [sys.executable, "-c", LIMITED, str(self.open_files)] if self.open_files else [sys.executable]
        self.process = subprocess.Popen(
            [*limited, "server.py", "--port", "0", *self.args],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env,
        )
        deadline = time.monotonic() + ready_timeout
        while not self.url:
            self._check_alive(deadline)
            match = SERVING.search(self.log_path.read_text(errors="replace"))
            if match:
                self.url = match.group(1)
            time.sleep(0.05)
        while ready and not all_serving(self.url):  # the socket is bound before the pools are warm
            self._check_alive(deadline)
            time.sleep(0.1)
        self.remember_descendants()
        return self

    def reach_every_child(self, children: int, attempts: int = 10) -> tuple[set[tuple[int, int]], int]:
        """Send blocking requests until every forked child has answered one.

        The kernel picks which child accepts, and a child that wakes up takes
        every connection waiting, so a single batch may land on one child.
        Returns the (pid, task_id) pairs seen and how many requests it took.
        """
        seen: set[tuple[int, int]] = set()
        sent = 0
        for _ in range(attempts):
            replies = get_many(copies(f"{self.url}/blocking/sleep?seconds=0.2", 4))
            sent += len(replies)
            seen |= {(r.json()["server"]["pid"], r.json()["server"]["task_id"]) for r in replies}
            if len(seen) == children:
                break
        return seen, sent

    def descriptors(self) -> dict[str, int]:
        """Open descriptors now: the server process's and its embedded upstream's."""
        counts = {"server": psutil.Process(self.pid).num_fds()}
        for process in self.descendants():
            with contextlib.suppress(psutil.Error):
                if "lab.modes.upstream.server" in process.cmdline():
                    counts["upstream"] = process.num_fds()
        return counts

    def _check_alive(self, deadline: float) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not ready in time:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def load_generators(self) -> list[psutil.Process]:
        """The server's `python -m lab.race` children (the lab page's races)."""
        found = []
        for process in self.descendants():
            with contextlib.suppress(psutil.Error):
                if "lab.race" in process.cmdline():
                    found.append(process)
        return found

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def remember_descendants(self) -> set[int]:
        """Note every process the server has started so far (checked after stop); their pids."""
        return self.watch.note(self.descendants())

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 30.0, *, group: bool = False) -> int | None:
        """Signal the server (with `group`, its whole process group, as a terminal's Ctrl-C does)
        and wait for it to exit; its exit code, or None if it did not."""
        assert self.process is not None
        self.remember_descendants()
        if self.process.poll() is None:
            if group:
                os.killpg(self.process.pid, sig)
            else:
                self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        return self.process.returncode

    def survivors(self, wait: float = STALL_S) -> list[int]:
        """Processes this server started that are still alive (zombies count as gone).

        Looks at every process it was seen to start and at every member of its
        session (started with start_new_session), so children started after the
        last look count too.
        """
        return self.watch.survivors({self.pid}, wait)

    def cleanup(self) -> None:
        """However the test went: kill whatever is left of the server, reap it."""
        if self.process is None:
            return
        self.watch.kill({self.pid})
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()
        # Killed outright, a server cannot remove its folders in the temporary directory: swept here, as the next
        # server to start would sweep them (lab/scratch.py), so that the suite's last one leaves none behind.
        for prefix in SCRATCH_PREFIXES:
            sweep(tempfile.gettempdir(), prefix)

    def stop(self) -> None:
        self.terminate()
        self.cleanup()

    def __enter__(self) -> LabServer:
        """Started and ready; stopped when the block ends, or here if it never became ready."""
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
