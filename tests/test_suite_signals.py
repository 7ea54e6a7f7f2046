"""What the suite's own processes hand down: the Ctrl-C tests need children that can be interrupted."""

from __future__ import annotations

import subprocess
import sys


def test_a_child_of_the_suite_starts_with_sigint_not_ignored() -> None:
    # A suite started in the background of a shell without job control inherits SIGINT ignored, and every
    # tool it started did too: the Ctrl-C tests of siege.sh and bench.cluster then failed on a signal that
    # could not arrive (tests/conftest.py takes Python's handler back). A child starts from the default.
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"
