"""The Dask processes' settle of CPython's interned-string table (lab/modes/distributed/worker.py)."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.modes.distributed import worker


def test_it_interns_its_throwaway_strings_only_on_a_python_that_lets_them_go(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def intern(name: str) -> str:
        calls.append(name)
        return name

    monkeypatch.setattr(sys, "intern", intern)
    monkeypatch.setattr(worker, "interned_immortal", lambda: True)
    worker.settle_interned()
    assert calls == []
    monkeypatch.setattr(worker, "interned_immortal", lambda: False)
    worker.settle_interned()
    assert len(calls) == len(set(calls)) == worker.SETTLE_INTERNED


def other_python(version: str) -> str | None:
    """pyenv's Python `version`, where this machine has it."""
    if shutil.which("pyenv") is None:
        return None
    found = subprocess.run(["pyenv", "prefix", version], check=False, capture_output=True, text=True)
    python = Path(found.stdout.strip()) / "bin" / "python3"
    return str(python) if found.returncode == 0 and python.exists() else None


@pytest.mark.parametrize(("version", "immortal"), [("3.12.1", True), ("3.13.0", False)])
def test_it_tells_a_python_whose_interned_strings_never_die(version: str, immortal: bool) -> None:
    assert not worker.interned_immortal()  # this suite's Python (3.11), where the settle was measured, lets them go
    python = other_python(version)
    if python is None:
        pytest.skip(f"no Python {version} from pyenv here")
    # The function alone (its module needs Dask), run by that Python.
    source = f"import sys\n{inspect.getsource(worker.interned_immortal)}\nprint(interned_immortal())"
    ran = subprocess.run([python, "-c", source], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == str(immortal)
