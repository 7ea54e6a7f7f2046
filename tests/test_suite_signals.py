"""The suite's own set-up: what its processes hand down (the Ctrl-C tests need children that can be interrupted),
and the order its files are handed to the workers in."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

from lab import ROOT
from tests.conftest import LONGEST_FILES, pytest_collection_modifyitems


def test_a_child_of_the_suite_starts_with_sigint_not_ignored() -> None:
    # A suite started in the background of a shell without job control inherits SIGINT ignored, and every
    # tool it started did too: the Ctrl-C tests of siege.sh and bench.cluster then failed on a signal that
    # could not arrive (tests/conftest.py takes Python's handler back). A child starts from the default.
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"


def test_the_longest_files_go_first_whole_and_each_one_named_exists() -> None:
    # A name misspelled or a file renamed would silently leave a long file where xdist hands it out last.
    assert [path for path in LONGEST_FILES if not (ROOT / path).is_file()] == []
    items: list[Any] = [SimpleNamespace(nodeid=f"{path}::{test}") for path, test in [
        ("tests/test_a.py", "one"), (LONGEST_FILES[1], "x"), ("tests/test_a.py", "two"), (LONGEST_FILES[0], "y"),
        (LONGEST_FILES[1], "z")]]  # fmt: skip
    pytest_collection_modifyitems(items)
    assert [item.nodeid for item in items] == [f"{LONGEST_FILES[0]}::y", f"{LONGEST_FILES[1]}::x",
                                               f"{LONGEST_FILES[1]}::z", "tests/test_a.py::one",
                                               "tests/test_a.py::two"]  # fmt: skip
