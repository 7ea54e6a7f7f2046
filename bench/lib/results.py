"""Where a bench run's results go (bench/results/<tool>-<stamp>/) and the machine facts recorded with them."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from lab import ROOT
from lab.config import DEFAULT_RESULTS
from lab.machine import cpu_count

RESULTS = DEFAULT_RESULTS  # where the server's GET /compare looks too


def new_results_dir(prefix: str = "", root: Path = RESULTS) -> Path:
    """A fresh bench/results/<prefix><timestamp>/ (a suffix keeps two runs in one second apart)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(100):
        path = root / f"{prefix}{stamp}{f'-{attempt}' if attempt else ''}"
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"could not create a fresh results folder under {root}")


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def siege_version() -> str | None:
    """`siege --version` (it prints to stderr); None without siege."""
    siege = shutil.which("siege")
    if siege is None:
        return None
    try:
        done = subprocess.run([siege, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"SIEGE\s+(\S+)", done.stdout + done.stderr)
    return match.group(1) if match else None


def commit() -> str | None:
    """The checkout's commit (short), "+changes" when files differ from it; None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()  # fmt: skip
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+changes" if changed else head


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_facts(native_threads: list[dict[str, Any]] | None, **extra: Any) -> dict[str, Any]:
    """Cores, CPU, Python and library versions; `native_threads` as a server's /stats reports them.

    The BLAS/OpenMP pool sizes that matter are the server's (it caps them when
    it starts), so they come from the server measured, not from this process.
    """
    return {
        "cores": cpu_count(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "cpu_model": cpu_model(),
        "memory_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "commit": commit(),
        "versions": {
            "tornado": _version("tornado"),
            "numpy": _version("numpy"),
            "scikit-learn": _version("scikit-learn"),
            "threadpoolctl": _version("threadpoolctl"),
            "psutil": _version("psutil"),
            "distributed": _version("distributed"),
            "siege": siege_version(),
        },
        "native_threads": native_threads,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }
