"""The command line: documented defaults, clear errors, --help that helps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lab import ROOT
from lab.config import Config, parse_args
from lab.machine import cpu_count
from lab.modes.processing.runner import PROCESS_POOL
from lab.modes.threading.runner import THREAD_POOL
from lab.modes.upstream.settings import UPSTREAM_CLIENT, UPSTREAM_TIMEOUT


def test_defaults() -> None:
    config = parse_args([])
    assert config == Config()
    assert (config.host, config.port, config.processes) == ("127.0.0.1", 8000, 1)
    assert config[THREAD_POOL] == min(32, cpu_count() + 4)
    assert config[PROCESS_POOL] == cpu_count()
    assert config.upstream is None and config.access_log and not config.debug


def test_flags() -> None:
    argv = (
        "--host 0.0.0.0 --port 0 --processes 0 --thread-pool 3 --process-pool 5 --upstream http://127.0.0.1:9/ "
        "--no-access-log --max-pending 7 --job-timeout 2.5 --upstream-timeout 1 --grace 3 --accept reuseport "
        "--upstream-client simple"
    )
    config = parse_args(argv.split())
    assert config.processes == 0 and config.process_count == cpu_count() and config.forked
    assert (config[THREAD_POOL], config[PROCESS_POOL], config.max_pending) == (3, 5, 7)
    assert config.upstream == "http://127.0.0.1:9"
    assert (config.job_timeout, config[UPSTREAM_TIMEOUT], config.grace) == (2.5, 1.0, 3.0)
    assert not config.access_log
    assert (config.accept, config[UPSTREAM_CLIENT]) == ("reuseport", "simple")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--processes", "-1"], "must be at least 0"),
        (["--thread-pool", "0"], "must be at least 1"),
        (["--job-timeout", "nan"], "positive number of seconds"),
        (["--upstream-timeout", "0"], "positive number of seconds"),
        (["--upstream", "ftp://x"], "is not an http(s)://host[:port] URL"),
        (["--debug", "--processes", "2"], "--debug needs --processes 1"),
        (["--accept", "round-robin"], "invalid choice: 'round-robin'"),
        (["--upstream", "https://x"], "add --upstream-client simple"),
        # A mode's own flag, checked by the runner that declares it (lab/modes/distributed/runner.py).
        (["--dask-scheduler", "tcp://127.0.0.1:1", "--dask-workers", "2"], "--dask-workers sizes the embedded cluster"),
        (["--dask-scheduler", "http://x:1"], "is not a Dask scheduler address"),
    ],
)
def test_bad_flags_exit_2_with_a_reason(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_help_lists_every_flag() -> None:
    out = subprocess.run(
        [sys.executable, "server.py", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for flag in (
        "--host", "--port", "--processes", "--thread-pool", "--process-pool", "--upstream", "--no-access-log",
        "--debug", "--max-pending", "--job-timeout", "--upstream-timeout", "--grace",
    ):  # fmt: skip
        assert flag in out


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ((1024, 4096), (4096, 4096)),  # raised, up to the hard limit
        ((1024, 1_000_000), (65536, 1_000_000)),  # raised to what the lab wants
        ((1024, -1), (65536, -1)),  # no hard limit
        ((100_000, 1_000_000), None),  # already enough: untouched
        ((-1, -1), None),  # unlimited: never lowered
    ],
)
def test_raise_fd_limit(
    monkeypatch: pytest.MonkeyPatch, limits: tuple[int, int], expected: tuple[int, int] | None
) -> None:
    import resource

    import lab.serve.main

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "RLIM_INFINITY", -1)
    monkeypatch.setattr(resource, "getrlimit", lambda _: limits)
    monkeypatch.setattr(resource, "setrlimit", lambda _, value: calls.append(value))
    lab.serve.main.raise_fd_limit()
    assert calls == ([expected] if expected else [])
