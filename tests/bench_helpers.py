"""Running the bench tools in tests: note every process they start, check none outlives them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from lab import ROOT
from tests.procs import STALL_S, Watch

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    """A real, non-trivial PNG: the magic bytes and more than a blank image's worth of data."""
    data = path.read_bytes()
    return data.startswith(PNG_MAGIC) and len(data) > 10_000


class Tracked:
    """A command in its own session; every descendant and session it creates is noted while it runs.

    The servers siege.sh starts lead sessions of their own (setsid), so after
    the command ends anything left in one of the noted sessions -- or any
    noted pid still running -- was left behind.
    """

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            list(argv),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.watch = Watch()
        self.sessions: set[int] = {self.process.pid}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.note()
            time.sleep(0.05)

    def note(self) -> None:
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        self.watch.note(children)
        for child in children:
            with contextlib.suppress(OSError):
                self.sessions.add(os.getsid(child.pid))

    def descendants(self, *words: str) -> list[psutil.Process]:
        """Running descendants whose command line mentions every one of `words`."""
        found = []
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.process.pid).children(recursive=True):
                # (One that ends between being listed and being read is not running.)
                with contextlib.suppress(psutil.Error):
                    if all(word in " ".join(child.cmdline()) for word in words):
                        found.append(child)
        return found

    def communicate(self, timeout: float) -> tuple[str, str]:
        try:
            out, err = self.process.communicate(timeout=timeout)
        finally:
            self._stop.set()
            self._watcher.join()
        return out, err

    def survivors(self, wait: float = STALL_S) -> list[int]:
        """Noted processes still running, and members of the noted sessions (waits for slow exits)."""
        return self.watch.survivors(self.sessions, wait)

    def __enter__(self) -> Tracked:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        """However the test went, nothing it started survives it."""
        self._stop.set()
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=10)
        self.watch.kill(self.sessions)
