"""How many of the project's files run Python functions while a server answers one request, after warm-up.

    python -m scripts.trace_files                         # /threading/count?n=1000 and /ping
    python -m scripts.trace_files /blocking/count?n=1000  # any paths, each counted on its own
    python -m scripts.trace_files --files /ping           # and the files themselves

Starts a server (one process, no access log, a free port) with a profile hook
(sys.setprofile and threading.setprofile, so pool threads too) that notes the
file of every Python function called while it records. Each path is asked for
a few times first (warm-up: caches filled, pools started), then the hook
records around one more request of it: SIGUSR1 starts it, SIGUSR2 writes what
it saw to a file and stops it. The files are the project's own (under its
root, the venv and this script left out). The server's own timers fall into
some windows, and a window can open late: each path is traced TRIES times and
the set of files seen most often kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("/threading/count?n=1000", "/ping")
WARMUP_REQUESTS = 20
SERVING = re.compile(r"serving on (http://[^/\s]+)/")
READY_TIMEOUT_S = 120.0
# Each path is traced this many times and the set seen most often kept: the server's own timers (the /stats
# board's periodic publication) fall into some windows, and a window's start can come late.
TRIES = 7
SETTLE_S = 0.01


def serve(out: Path, argv: Sequence[str]) -> None:
    """Run server.py's server in this process, its functions' files noted while SIGUSR1..SIGUSR2 records."""
    seen: set[str] = set()
    recording = threading.Event()
    skip = (str(ROOT / ".venv"), __file__)

    def hook(frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and recording.is_set():
            seen.add(frame.f_code.co_filename)

    def start(*_: object) -> None:
        seen.clear()
        recording.set()

    def stop(*_: object) -> None:
        recording.clear()
        mine = sorted(
            str(Path(name).relative_to(ROOT))
            for name in seen
            if name.startswith(str(ROOT)) and not name.startswith(skip)
        )
        out.write_text(json.dumps(mine))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    threading.setprofile(hook)
    sys.setprofile(hook)
    sys.argv = [str(ROOT / "server.py"), *argv]
    runpy.run_path(sys.argv[0], run_name="__main__")  # (as `python server.py` runs it)


def get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=60) as reply:
        reply.read()


def wait_for(path: Path, since: float) -> list[str]:
    """What the server wrote to `path` after `since` (its SIGUSR2 answer)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_mtime_ns > since * 1e9:
            files: list[str] = json.loads(path.read_text())
            return files
        time.sleep(0.05)
    raise SystemExit(f"the server wrote nothing to {path} within 10 s")


def count(paths: Sequence[str], show_files: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="trace-files-") as scratch:
        out, log = Path(scratch) / "files.json", Path(scratch) / "server.log"
        argv = ["--port", "0", "--processes", "1", "--no-access-log"]
        with log.open("w") as sink:
            server = subprocess.Popen(
                [sys.executable, "-m", "scripts.trace_files", "--serve", str(out), *argv],
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            base = _ready(log, server)
            for path in paths:
                for _ in range(WARMUP_REQUESTS):
                    get(base + path)
                seen = Counter(tuple(_traced(server, out, base + path)) for _ in range(TRIES))
                most = max(seen.values())
                files = min((traced for traced, times in seen.items() if times == most), key=len)
                print(f"{path}: {len(files)} project files")
                if show_files:
                    print("".join(f"    {name}\n" for name in files), end="")
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _traced(server: subprocess.Popen[bytes], out: Path, url: str) -> list[str]:
    """The project files that ran Python functions around one request of `url`."""
    server.send_signal(signal.SIGUSR1)
    time.sleep(SETTLE_S)  # (its handler run before the request arrives)
    since = time.time()
    get(url)
    time.sleep(SETTLE_S)  # (the request's own end, after its answer left, counted)
    server.send_signal(signal.SIGUSR2)
    return wait_for(out, since)


def _ready(log: Path, server: subprocess.Popen[bytes]) -> str:
    """The server's base URL, once it answers /stats."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode}):\n{log.read_text()[-2000:]}")
        found = SERVING.search(log.read_text())
        if found:
            try:
                get(found.group(1) + "/stats")
                return found.group(1)
            except OSError:
                pass
        time.sleep(0.2)
    raise SystemExit(f"the server did not come up in {READY_TIMEOUT_S:g} s:\n{log.read_text()[-2000:]}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts.trace_files", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS), help="paths to ask for, each on its own")
    parser.add_argument("--files", action="store_true", help="list the files, not only how many")
    args = parser.parse_args(argv)
    count(args.paths, args.files)
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    if sys.argv[1:2] == ["--serve"]:  # the server `count` starts: --serve OUT SERVER_ARGS...
        serve(Path(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit(main())
