"""A real Dask cluster for the tests, started as a user starts one: `dask scheduler`, then `dask worker`s.

Each worker is its own `dask worker` command, as on separate machines, and
runs from an empty folder: the lab's client must ship the `workloads` package
to it. Everything listens on loopback, ports picked by the OS; every process
is killed when the test ends, whatever happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import distributed

from tests.procs import Watch, wait_for
from workloads.ml import LAZY_ENV

DASK = str(Path(sys.executable).parent / "dask")
LOOPBACK = ["--host", "127.0.0.1", "--no-dashboard", "--dashboard-address", "127.0.0.1:0"]
# Dask's local directories go under its temporary directory, by default one for
# the whole machine (/tmp/dask-scratch-space): here, the test's own folder, so
# that nothing these processes write or are sent outlives the test.
SCRATCH = "dask-scratch-space"


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate (its own CA) and its key, made with openssl: what a tls:// cluster needs."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=lab-test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class DaskCluster:
    """`tls`: a certificate (its own CA) and its key; the cluster then speaks TLS and admits only their holders."""

    def __init__(self, folder: Path, tls: tuple[Path, Path] | None = None) -> None:
        self.folder = folder
        self.tls = ["--tls-ca-file", str(tls[0]), "--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] if tls else []
        self.scheduler_file = folder / "scheduler.json"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.watch = Watch()
        self.address = ""

    def _start(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        with (self.folder / log_name).open("wb") as log:
            process = subprocess.Popen(
                [DASK, *argv], cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                # As a user starts one: its workers train the predict model when a lab connects (not lazy, as the
                # suite's own labs are: tests/conftest.py).
                env={**os.environ, "DASK_TEMPORARY_DIRECTORY": str(self.folder), LAZY_ENV: "0"},
            )  # fmt: skip
        self.processes.append(process)
        return process

    def start_scheduler(self) -> str:
        self.scheduler_file.unlink(missing_ok=True)  # the scheduler writes its address there once it listens
        protocol = ["--protocol", "tls"] if self.tls else []
        self._start(["scheduler", "--port", "0", "--scheduler-file", str(self.scheduler_file), *LOOPBACK, *protocol,
                     *self.tls], "scheduler.log")  # fmt: skip
        # The scheduler creates the file before it has written it: wait for a whole JSON document.
        assert wait_for(self._written_address, timeout=60), self.log("scheduler.log")
        return self.address

    def _written_address(self) -> bool:
        try:
            self.address = json.loads(self.scheduler_file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            return False
        return True

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        where = ["--scheduler-file", str(self.scheduler_file), *LOOPBACK, *self.tls]
        return self._start(["worker", *where, "--nthreads", "1", "--name", name], f"worker-{name}.log")

    def client(self) -> distributed.Client:
        """A client of this cluster for the test itself: another user of the same workers."""
        return distributed.Client(self.address, timeout=30)

    def log(self, name: str) -> str:
        path = self.folder / name
        return path.read_text(errors="replace") if path.exists() else ""

    def note(self) -> None:
        """Remember every process of the cluster (nannies' workers included), to check none outlives it."""
        import psutil

        for process in self.processes:
            try:
                root = psutil.Process(process.pid)
                self.watch.note([root, *root.children(recursive=True)])
            except psutil.NoSuchProcess:
                continue

    def stop(self) -> None:
        self.note()
        self.watch.kill({p.pid for p in self.processes})
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)
