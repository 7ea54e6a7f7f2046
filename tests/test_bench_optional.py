"""Optional dependencies missing: one line naming the install command, exit 2, no traceback, nothing started."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.lib.optional import need_module, need_program
from lab import ROOT

# bench.page run as `python -m bench.page` would run it, with Playwright made unimportable first.
WITHOUT_PLAYWRIGHT = (
    "import runpy, sys; sys.modules['playwright'] = None; sys.argv = ['bench.page', '--rounds', '1']; "
    "runpy.run_module('bench.page', run_name='__main__', alter_sys=True)"
)


def test_bench_page_without_playwright_says_how_to_install_it_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_PLAYWRIGHT], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr  # one line: no traceback, no "starting a server"
    assert "Playwright" in done.stderr and "pip install -r requirements-dev.txt" in done.stderr


def test_a_missing_module_or_program_exits_2_naming_its_install_command(capsys: pytest.CaptureFixture[str]) -> None:
    for check in (lambda: need_module("no_such_module_here", "a thing", "pip install a-thing", tool="bench.x"),
                  lambda: need_program("no-such-program-here", "apt-get install a-thing", tool="bench.x")):  # fmt: skip
        with pytest.raises(SystemExit) as stopped:
            check()
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: bench.x needs ") and err.count("\n") == 1 and "install a-thing" in err
    assert need_module("json", "json", "-", tool="bench.x").__name__ == "json"
