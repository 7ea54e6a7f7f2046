"""A Dask cluster across hosts (bench/lib/netns.py): `dask scheduler`, one `dask worker` per worker host, the lab.

    with Network(ROLES) as net, HostCluster(net, folder, DaskTimeouts.quick()) as hosts:
        hosts.start(["--job-timeout", "10"])                 # scheduler, workers, then the lab
        status, body, sent, received = hosts.get("/distributed/count?n=1")

Each runs as a user would run it on a machine of its own, with the project's
venv: the scheduler listens on its host's address (port 0, read back from
its scheduler file), each worker (one thread, under a nanny) on its own, and
the lab on its host's loopback, `--dask-scheduler` pointing across the
network. The client side (`get`) runs in threads that live in the lab's host
namespace, so the bench needs no address or route in the root namespace.
Every process is started in a session of its own and killed on `stop()`;
the namespaces' own teardown catches anything that got away.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from dask.utils import parse_timedelta

from bench.lib.netns import Network, threads_in
from bench.lib.servers import ServerError, all_serving, log_tail, stop_server, wait_ready
from lab import ROOT, loopback

DASK = str(Path(sys.executable).parent / "dask")
ROLES = ("sched", "w1", "w2", "lab")
WORKERS = ("w1", "w2")
SERVING_HERE = re.compile(r"serving on (http://127\.0\.0\.1:\d+)/")
START_TIMEOUT_S = 120.0  # two workers and a lab start slowly while other suites load both cores
RESTART_CHECK_S = 1.0  # how often a worker host's `dask worker` is checked, and so how soon it is restarted


@dataclass(frozen=True)
class Reply:
    """One answer: status (0: none came, `body` says why), parsed body, headers, and when it was sent and received."""

    status: int
    body: Any
    headers: dict[str, str]
    sent: float
    received: float

    @property
    def seconds(self) -> float:
        return self.received - self.sent


def fetch(url: str, timeout: float) -> Reply:
    """GET `url` on a fresh connection, keeping the headers (Retry-After) that lab.race.engine's get drops."""
    sent = time.time()
    try:
        with loopback.urlopen(url, timeout=timeout) as answer:
            status, headers, raw = answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = error.code, dict(error.headers), error.read()
    except (OSError, http.client.HTTPException) as error:  # refused, reset, timed out, cut short
        return Reply(0, {"error": {"status": 0, "message": str(error) or type(error).__name__}}, {}, sent, time.time())
    try:
        body = json.loads(raw)
    except ValueError:
        body = raw.decode(errors="replace")
    return Reply(status, body, headers, sent, time.time())


@dataclass(frozen=True)
class DaskTimeouts:
    """Dask's settings for noticing a silent peer, given to every process of the cluster (the lab's client too).

    worker_ttl  the scheduler drops a worker not heard from for this long (it checks every ttl, at least 5 s)
    connect     how long a connection attempt (a reconnection, the nanny's restart call) may take
    tcp         a connection with data unacknowledged this long is dead (TCP_USER_TIMEOUT; Dask's minimum is 11 s)
    """

    worker_ttl: str = "5 minutes"
    connect: str = "30s"
    tcp: str = "30s"

    @classmethod
    def tuned(cls) -> DaskTimeouts:
        """For a real network (docs/operating.md): a silent worker dropped in about 20 s, a flap of 8 s ridden out."""
        return cls(worker_ttl="20s", connect="5s", tcp="20s")

    @classmethod
    def quick(cls) -> DaskTimeouts:
        """For tests: a silent worker dropped in about 12 s (a flap of a few seconds may cost a worker restart)."""
        return cls(worker_ttl="5s", connect="3s", tcp="11s")

    def env(self) -> dict[str, str]:
        return {
            "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": self.worker_ttl,
            "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": self.connect,
            "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": self.tcp,
        }

    def detection_s(self) -> float:
        """The longest the scheduler can take to drop a silent worker with these settings.

        Either its worker-ttl check (every ttl, for a worker unseen past
        max(ttl, 5 s), then a restart call to the worker's nanny that waits
        `connect` before giving up) or its connection to the worker dying of
        TCP's own timeout (keepalives or unacknowledged data), whichever ends first.
        """
        ttl, connect, tcp = (float(parse_timedelta(value)) for value in (self.worker_ttl, self.connect, self.tcp))
        return min(max(ttl, 5.0) + ttl + connect, tcp + 1.0)

    def describe(self) -> dict[str, str]:
        return {"worker-ttl": self.worker_ttl, "comm.timeouts.connect": self.connect, "comm.timeouts.tcp": self.tcp}


class HostCluster:
    """The processes of a cluster across `net`'s hosts, their logs in `folder`; `stop()` ends them all."""

    def __init__(self, net: Network, folder: Path, timeouts: DaskTimeouts, *, client_threads: int = 24) -> None:
        self.net = net
        self.folder = folder
        self.timeouts = timeouts
        self.scheduler = ""  # tcp://ADDRESS:PORT once started
        self.labs: dict[str, str] = {}  # lab servers' base URLs, reachable from self.client's threads
        self.processes: dict[str, Any] = {}  # name -> Popen
        self.client: ThreadPoolExecutor = threads_in(net["lab"].namespace, client_threads)
        self.restarts: list[tuple[str, float]] = []  # (worker host, time.time()) for each `dask worker` restarted
        self._stopping = threading.Event()
        self._keeper: threading.Thread | None = None

    # ---------- starting ----------

    def start(self, lab_flags: Sequence[str] = ()) -> HostCluster:
        self.start_scheduler()
        for role in WORKERS:
            self.start_worker(role)
        self._keeper = threading.Thread(target=self._keep_workers, name="worker-keeper", daemon=True)
        self._keeper.start()
        self.start_lab(lab_flags)
        return self

    def _keep_workers(self) -> None:
        """Start a worker host's `dask worker` again when it has exited, as systemd's Restart=always would.

        Dask does not reconnect a worker: one cut off from its scheduler for
        longer than the cluster's timeouts closes itself, its nanny too, once
        it hears that it was dropped; a deployment starts it again.
        """
        while not self._stopping.wait(RESTART_CHECK_S):
            for role in WORKERS:
                process = self.processes.get(role)
                if process is not None and process.poll() is not None and not self._stopping.is_set():
                    self.restarts.append((role, time.time()))
                    self.start_worker(role)

    def _start(self, name: str, role: str, argv: Sequence[str]) -> None:
        scratch = self.folder / name
        scratch.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.timeouts.env(), "DASK_TEMPORARY_DIRECTORY": str(scratch)}
        with (self.folder / f"{name}.log").open("ab") as log:
            self.processes[name] = self.net.run(
                role, argv, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def start_scheduler(self) -> str:
        where = self.folder / "scheduler.json"
        where.unlink(missing_ok=True)
        self._start("scheduler", "sched", [DASK, "scheduler", "--host", self.net["sched"].address, "--port", "0",
                                           "--no-dashboard", "--scheduler-file", str(where)])  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.scheduler:
            self._alive("scheduler")
            try:  # the scheduler creates the file before it writes it: wait for a whole document
                self.scheduler = json.loads(where.read_text())["address"]
            except (OSError, ValueError, KeyError):
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"no scheduler address after {START_TIMEOUT_S:g} s: {self.log('scheduler')}"
                    ) from None
                time.sleep(0.1)
        return self.scheduler

    def start_worker(self, role: str) -> None:
        """A `dask worker` (a nanny and one single-threaded worker process) on host `role`, from an empty folder."""
        self._start(role, role, [DASK, "worker", self.scheduler, "--host", self.net[role].address, "--nthreads", "1",
                                 "--name", role, "--no-dashboard"])  # fmt: skip

    def start_lab(self, flags: Sequence[str], name: str = "lab", *, external: bool = True) -> str:
        """A lab server on the lab's host, on its loopback; `external`: on this cluster (else its embedded one)."""
        cluster = ["--dask-scheduler", self.scheduler] if external else []
        self._start(name, "lab", [sys.executable, str(ROOT / "server.py"), "--port", "0", "--no-access-log",
                                  *cluster, *flags])  # fmt: skip
        log = self.folder / f"{name}.log"
        url = wait_ready(log, self.processes[name].pid, START_TIMEOUT_S, address=SERVING_HERE, ready=self._serving)
        self.labs[name] = url
        return url

    def stop_lab(self, name: str) -> None:
        process = self.processes.pop(name, None)
        self.labs.pop(name, None)
        if process is not None:
            stop_server(process, 5.0)

    def _serving(self, url: str) -> bool:
        return self.client.submit(all_serving, url).result()

    def _alive(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is not None:
            raise ServerError(f"{name} exited ({process.returncode}); its log ends:\n{self.log(name)}")

    def log(self, name: str) -> str:
        return log_tail(self.folder / f"{name}.log")

    # ---------- asking the lab ----------

    @property
    def url(self) -> str:
        return self.labs["lab"]

    def get(self, path: str, timeout: float = 60.0, lab: str = "lab") -> Reply:
        """GET a lab's `path` from its own host."""
        return self.client.submit(fetch, f"{self.labs[lab]}{path}", timeout).result()

    def workers(self) -> list[dict[str, Any]]:
        """The workers the lab's /stats sees now (the scheduler's view, polled by the lab every 0.5 s)."""
        reply = self.get("/stats", 10)
        if reply.status != 200 or not isinstance(reply.body, dict):
            return []
        found: list[dict[str, Any]] = reply.body["server"]["dask"].get("workers") or []
        return found

    def wait_for_workers(self, count: int, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while len(self.workers()) != count:
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {role}\n{self.log(role)}" for role in WORKERS)
                raise ServerError(f"the lab sees {len(self.workers())} worker(s), not {count}:\n{logs}")
            time.sleep(0.2)

    # ---------- stopping ----------

    def stop(self) -> None:
        """The lab first (SIGTERM, so that it closes its client), then every Dask process at once."""
        self._stopping.set()
        if self._keeper is not None:
            self._keeper.join()
        for name in list(self.labs):
            lab = self.processes.pop(name, None)
            if lab is not None:
                stop_server(lab, 5.0)
        for process in self.processes.values():
            stop_server(process, 0.5)
        self.processes.clear()
        self.client.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> HostCluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
