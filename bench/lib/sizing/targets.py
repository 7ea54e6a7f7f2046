"""What the advisor sizes: a lab route (server.py with --processes and --thread-pool) or a user's WSGI app (gunicorn
-k gthread with -w and --threads), one server per point, each started, paused, resumed and always stopped.

Checked before anything starts: a lab route resolves as the lab resolves it
(lab/runs.py: its workload and params, in /threading, whose pool is what
--thread-pool sizes); a WSGI app imports and names a callable, in a process
of its own (an app that starts threads or processes at import says so there:
a server that forks after importing it leaves them behind). A bad one is an
InputError: one line, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.lib.peers import BIN, Running, Setup, lab
from bench.lib.servers import ServerError, log_tail
from bench.lib.sizing.model import Point
from lab.config import build_parser
from lab.modes.registry import MODES
from lab.runs import Refused, resolve

MODE = "threading"  # the lab mode whose pool --thread-pool sizes
# What a started lab carries that a point does not need: one process-pool worker, no queue limit (the load
# decides how many wait, as a listen queue would), a short grace on the way out.
LAB_FLAGS = ("--process-pool", "1", "--interpreter-pool", "1", "--max-pending", "100000")
# Flags each point's lab server gets from bench.size itself.
POINT_FLAGS = frozenset({"--processes", "--thread-pool", "--port", "--host"})
# What the lab and gunicorn log when a stop signal reaches them.
STOPPING = ("lab.server: stopping", "Handling signal: term", "Handling signal: int")
IMPORT_CHECK = """
import importlib, json, sys, threading
sys.path.insert(0, sys.argv[1])
module, _, name = sys.argv[2].partition(":")
app = importlib.import_module(module)
for part in (name or "application").split("."):
    app = getattr(app, part)
if not callable(app):
    raise TypeError(f"{sys.argv[2]} is not callable")
import psutil
try:
    from threadpoolctl import threadpool_info
    native = threadpool_info()
except ImportError:
    native = None
children = [p.pid for p in psutil.Process().children(recursive=True)]
print(json.dumps({"threads": threading.active_count(), "children": len(children), "native_threads": native}))
"""


class InputError(Exception):
    """Input the advisor cannot size: its message is the one line printed before exit 2."""


@dataclass(frozen=True)
class Target:
    """A lab route or a WSGI app, and the path its requests go to."""

    kind: str  # "lab" or "wsgi"
    path: str
    app: str = ""  # module:callable, for a WSGI app
    cwd: Path = field(default_factory=Path.cwd)
    workload: str = ""
    facts: dict[str, Any] = field(default_factory=dict)  # a WSGI app's import: threads, children, BLAS pools
    server_args: tuple[str, ...] = ()  # more flags for every lab server (--database postgresql://...)

    @property
    def name(self) -> str:
        return self.path if self.kind == "lab" else f"{self.app} {self.path}"


def lab_route(path: str, server_args: tuple[str, ...] = ()) -> Target:
    """A /threading/<workload>?<params> route, checked as the lab checks it."""
    parts = urllib.parse.urlsplit(path)
    segments = [s for s in parts.path.split("/") if s]
    if not path.startswith("/") or not segments or segments[0] not in MODES or len(segments) > 2:
        raise InputError(f"--path {path!r} is not a lab route: give /{MODE}/<workload>?<params>")
    if segments[0] != MODE:
        raise InputError(f"--path {path!r}: the advisor sizes --processes x --thread-pool, so give a /{MODE}/ route")
    try:
        run = resolve(MODE, segments[1] if len(segments) > 1 else None, urllib.parse.parse_qs(parts.query))
    except Refused as refused:
        raise InputError(f"--path {path!r}: {refused.message}") from None
    return Target("lab", path, workload=run.workload, server_args=server_args)


def server_args(text: str) -> tuple[str, ...]:
    """More flags for every lab server, checked with server.py's own parser; not the ones each point sets."""
    words = tuple(shlex.split(text))
    parser = build_parser()
    parser.exit_on_error = False
    try:
        _, unknown = parser.parse_known_args(list(words))
    except argparse.ArgumentError as error:
        raise InputError(f"--server-args: {error}") from None
    if unknown:
        raise InputError(f"--server-args: server.py has no {' '.join(unknown)}")
    taken = sorted({word.split("=")[0] for word in words} & POINT_FLAGS)
    if taken:
        raise InputError(f"--server-args: {', '.join(taken)} is set for each point by bench.size")
    return words


def wsgi_app(spec: str, path: str, cwd: Path) -> Target:
    """A `module:callable` importable from `cwd` (checked in a process of its own), and the path to send to it."""
    if ":" not in spec or not all(spec.partition(":")[::2]):
        raise InputError(f"--wsgi {spec!r}: give module:callable, as gunicorn takes it (peers.app:application)")
    if not path.startswith("/"):
        raise InputError(f"--path {path!r}: give the endpoint's path, starting with /")
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK, str(cwd), spec], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["it exited with an error"])[-1]
        raise InputError(f"--wsgi {spec!r} does not import from {cwd}: {last}")
    return Target("wsgi", path, app=spec, cwd=cwd, facts=json.loads(done.stdout.strip().splitlines()[-1]))


def setup(target: Target, point: Point) -> Setup:
    """The server command line for one point."""
    p, t = str(point.processes), str(point.threads)
    if target.kind == "lab":
        flags = ("--processes", p, "--thread-pool", t, *LAB_FLAGS, *target.server_args)
        return lab(f"--processes {p} --thread-pool {t}", target.path, MODE, *flags)
    # --timeout 0: the advisor pauses the points it is not measuring (SIGSTOP), and gunicorn's master would
    # take the pause for silent workers and kill them; --chdir puts the app's folder first on sys.path.
    argv = (str(BIN / "gunicorn"), "-k", "gthread", "-w", p, "--threads", t, "--bind", "127.0.0.1:0", "--chdir",
            str(target.cwd), "--timeout", "0", "--backlog", "2048", "--no-control-socket", target.app)  # fmt: skip
    return Setup("gunicorn", f"-w {p} --threads {t}", argv, target.path, MODE, point.processes, point.threads,
                 ready_path=target.path)  # fmt: skip


@dataclass
class Server:
    """One point's server, running: its URL, the processes that serve requests, pausable."""

    target: Target
    point: Point
    running: Running
    paused: bool = False

    @property
    def url(self) -> str:
        return f"{self.running.url}{self.target.path}"

    def serving(self) -> list[psutil.Process]:
        """The processes requests run in: gunicorn's workers; the lab's one process, or its forked children (the
        same command line as their parent: its pool workers and upstream were started with their own)."""
        root = self.running.tree()[:1]
        if not root:
            return []
        if self.target.kind == "lab" and self.point.processes == 1:
            return root
        children = root[0].children()
        if self.target.kind == "wsgi":
            return children
        with contextlib.suppress(psutil.Error):
            command = root[0].cmdline()
            return [child for child in children if _cmdline(child) == command]
        return []

    def master(self) -> psutil.Process | None:
        """The process that forks the serving ones (None for one lab process, which forks nothing)."""
        root = self.running.tree()[:1]
        forks = self.target.kind == "wsgi" or self.point.processes > 1
        return root[0] if root and forks else None

    def check_alive(self) -> None:
        """Raise (with its log's end) if the server has exited, or is stopping: something else signalled it."""
        gone = self.running.process.poll() is not None
        tail = log_tail(self.running.log_path, 40)
        if gone or any(words in tail for words in STOPPING):
            raise ServerError(
                f"the {self.point.label} server {'exited' if gone else 'was told to stop'} during the sweep, "
                f"not by bench.size; its log ends:\n{log_tail(self.running.log_path)}"
            )

    def pause(self) -> None:
        """SIGSTOP the whole server: a point not being measured takes no CPU from the one that is."""
        os.killpg(self.running.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.killpg(self.running.process.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> list[int]:
        """Stop it (resumed first: a stopped process would not see SIGTERM); pids still alive after, if any."""
        with contextlib.suppress(ProcessLookupError):
            self.resume()
        return self.running.stop()


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def start(target: Target, point: Point, folder: Path, upstream: str) -> Server:
    """Start `target` at `point`, logging to `folder`; returned once it answers."""
    return Server(target, point, Running.start(setup(target, point), folder, upstream))
