"""What the lab page costs the machine it measures: the same race from the command line and from the page.

    python -m bench.page                                  # a server of its own, processing, count, 3 rounds
    python -m bench.page --url http://127.0.0.1:8000 --mode threading --rounds 5

Each round runs the race twice on one server, one right after the other:
from the command line (`python -m bench.race --jsonl`, the very load
generator the page's races use) and from the page in headless Chromium
(Debian's chromium, driven by Playwright). Meanwhile it samples the CPU
seconds of the browser's processes, of the server's (the server process and
its pool or cluster workers), and of the load generator. It prints both
ratios (makespan / ideal) and the CPU figures, and writes page.json under
bench/results/page-<stamp>/. A page that costs little leaves the two ratios
alike and its browser's CPU a small fraction of the workers'.

With --screenshot PATH it runs one more page race after the measured rounds
and saves the page as it looks mid-race (half the requests answered) to PATH.

Needs the dev requirements (Playwright; `make test` installs them) and chromium.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from statistics import median
from typing import Any

import psutil

if __package__ in (None, ""):  # run as `python bench/page.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.args import CONCURRENCY, NO_FILES, OUT, PARAM, ROUNDS, SERVER_ARGS, URL, WORKLOAD
from bench.lib.browser import launch, need_browser
from bench.lib.command import new_parser, run_command
from bench.lib.results import new_results_dir
from bench.lib.servers import lab_server
from bench.lib.tables import Column, text_table
from lab import ROOT
from lab.modes.registry import MODES

RACE_TIMEOUT_MS = 180_000
TOOL = "python -m bench.page"
SAMPLE_EVERY_S = 0.1

COLUMNS = (
    Column("round", "round", "{:d}"),
    Column("source", "from", "{}"),
    Column("elapsed_s", "elapsed s"),
    Column("ideal_s", "ideal s"),
    Column("ratio", "ratio"),
    Column("browser_cpu_s", "browser CPU s"),
    Column("workers_cpu_s", "workers CPU s"),
    Column("server_cpu_s", "server CPU s"),
    Column("generator_cpu_s", "load gen CPU s"),
)


class CpuMeter:
    """CPU seconds (user + system) used by a changing set of processes since start().

    `find` names the processes of interest whenever asked; each is read every
    SAMPLE_EVERY_S in a thread, so one that exits meanwhile (a load generator
    at the end of its race) still counts what it used until its last reading.
    """

    def __init__(self, find: Callable[[], Iterable[psutil.Process]]) -> None:
        self.find = find
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> None:
        for process in self.find():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                used = times.user + times.system
                # A process born after start() counts from zero; one present at start() from then.
                self._first.setdefault(process.pid, used if self._thread is None else 0.0)
                self._last[process.pid] = used

    def start(self) -> CpuMeter:
        self._read()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self._read()

    def stop(self) -> float:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()
        return round(sum(self._last[pid] - self._first[pid] for pid in self._last), 3)


def settle(processes: Callable[[], Iterable[psutil.Process]], quiet_s: float = 0.5, timeout: float = 10.0) -> bool:
    """Wait until these processes have been (nearly) idle for `quiet_s`; False if they never were.

    A page just loaded keeps its browser busy for a few seconds more: that
    is not the cost of the race about to be measured.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meter = CpuMeter(processes).start()
        time.sleep(quiet_s)
        if meter.stop() < 0.05 * quiet_s:
            return True
    return False


def family(root: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [root, *root.children(recursive=True)]
    return []


def is_load_generator(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return "bench.race" in process.cmdline()
    return False


def is_upstream(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return "lab.modes.upstream.server" in process.cmdline()
    return False


class Meters:
    """The browser's, the server's own process, its workers and the load generator, measured together."""

    def __init__(self, server_pid: int, browser: psutil.Process | None, generator_root: psutil.Process) -> None:
        server = psutil.Process(server_pid)

        def workers() -> list[psutil.Process]:
            return [p for p in family(server)[1:] if not is_load_generator(p) and not is_upstream(p)]

        self.meters = {
            "browser_cpu_s": CpuMeter(lambda: family(browser) if browser else []),
            "server_cpu_s": CpuMeter(lambda: [server]),
            "workers_cpu_s": CpuMeter(workers),
            "generator_cpu_s": CpuMeter(lambda: [p for p in family(generator_root) if is_load_generator(p)]),
        }

    @contextlib.contextmanager
    def measuring(self) -> Iterator[dict[str, float]]:
        used: dict[str, float] = {}
        for meter in self.meters.values():
            meter.start()
        try:
            yield used
        finally:
            for name, meter in self.meters.items():
                used[name] = meter.stop()


def cli_race(base: str, args: argparse.Namespace) -> dict[str, Any]:
    """The race from the command line: the page's own load generator, with the page's warm-up."""
    argv = [sys.executable, "-m", "bench.race", "--url", base, "--mode", args.mode, "-c", str(args.concurrency),
            "--jsonl", "--warmup", "1"]  # fmt: skip
    if MODES[args.mode].runs_workloads:
        argv += ["--workload", args.workload]
    for name, value in args.param:
        argv += ["-p", f"{name}={value}"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if not events or events[-1]["event"] != "done":
        raise RuntimeError(f"the command-line race failed: {done.stderr.strip()[-300:] or events[-1:]}")
    summary: dict[str, Any] = events[-1]["summary"]
    return summary


def page_race(page: Any, args: argparse.Namespace, screenshot: Path | None = None) -> dict[str, Any]:
    """The race from the page: the form filled in and submitted as a person would.

    With `screenshot`, the viewport is saved there once half the requests have their bar.
    """
    page.select_option("#mode", args.mode)
    if MODES[args.mode].runs_workloads:
        page.select_option("#workload", args.workload)
    for name, value in args.param:
        page.fill(f"#param-{name}", value)
    page.fill("#concurrency", str(args.concurrency))
    page.click("#run")
    if screenshot is not None:
        page.wait_for_selector(f"#timeline .request-bar >> nth={max(0, args.concurrency // 2 - 1)}",
                               timeout=RACE_TIMEOUT_MS)  # fmt: skip
        page.screenshot(path=str(screenshot))  # the viewport: form, timeline, ping and GIL tracks
    page.wait_for_selector("#summary[data-ratio]", timeout=RACE_TIMEOUT_MS)
    summary: dict[str, Any] = json.loads(page.get_attribute("#summary", "data-summary") or "{}")
    page.wait_for_selector("#run:not([disabled])", timeout=RACE_TIMEOUT_MS)
    return summary


def run(args: argparse.Namespace, base: str, server_pid: int) -> list[dict[str, Any]]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 -- a dev dependency, needed here only

    rows: list[dict[str, Any]] = []
    me = psutil.Process()
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            chromium = next((p for p in me.children(recursive=True) if p.name().startswith("chrom")), None)
            roots = [p for p in family(chromium)[:1]] if chromium else []
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(base + "/")
            page.wait_for_selector("body[data-ready=true]")
            server = psutil.Process(server_pid)
            for number in range(1, args.rounds + 1):
                cli = Meters(server_pid, roots[0] if roots else None, me)
                with cli.measuring() as used:
                    summary = cli_race(base, args)
                rows.append(_row(number, "command line", summary, used))
                print(text_table(rows[-1:], COLUMNS).splitlines()[-1], file=sys.stderr)
                on_page = Meters(server_pid, roots[0] if roots else None, server)
                settle(lambda: family(roots[0]) if roots else [])
                with on_page.measuring() as used:
                    summary = page_race(page, args)
                rows.append(_row(number, "page", summary, used))
                print(text_table(rows[-1:], COLUMNS).splitlines()[-1], file=sys.stderr)
            if args.screenshot is not None:  # an extra race, so that taking the picture costs no measured one
                page_race(page, args, args.screenshot)
                print(f"wrote {args.screenshot}", file=sys.stderr)
        finally:
            browser.close()
    return rows


def _row(number: int, source: str, summary: dict[str, Any], used: dict[str, float]) -> dict[str, Any]:
    return {"round": number, "source": source, **{k: summary.get(k) for k in ("elapsed_s", "ideal_s", "ratio")},
            **used, "summary": summary}  # fmt: skip


def verdict(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds: the page's ratio against the command line's, the browser's CPU against the workers'."""
    cli = [r for r in rows if r["source"] == "command line"]
    page = [r for r in rows if r["source"] == "page"]
    cli_ratio, page_ratio = median(r["ratio"] for r in cli), median(r["ratio"] for r in page)
    shares = [r["browser_cpu_s"] / r["workers_cpu_s"] for r in page if r["workers_cpu_s"]]
    return {
        "cli_ratio": cli_ratio,
        "page_ratio": page_ratio,
        "page_over_cli": round(page_ratio / cli_ratio, 3),
        "browser_share_of_workers_cpu": round(median(shares), 4) if shares else None,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.page", __doc__)
    URL.add(parser)
    parser.add_argument("--mode", choices=list(MODES), default="processing")
    WORKLOAD.add(parser)
    PARAM.add(parser)
    CONCURRENCY.add(parser)
    ROUNDS.add(parser, default=3, help="command line + page races (default: 3)")
    OUT.add(parser, help="folder for page.json (default: a new one)")
    NO_FILES.add(parser)
    SERVER_ARGS.add(parser, help="flags for the server started here")
    parser.add_argument("--screenshot", type=Path, metavar="PATH",
                        help="after the rounds, one more page race, saved to PATH (PNG) mid-race")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    need_browser(TOOL)
    return run_command(lambda: _measure(args))


def _measure(args: argparse.Namespace) -> None:
    with lab_server(args.url, args.server_args, "page-server-") as base:
        rows = run(args, base, _server_pid(base))
    found = verdict(rows)
    print(text_table(rows, COLUMNS))
    print(
        f"\nmedian ratio: command line {found['cli_ratio']:.2f}, page {found['page_ratio']:.2f} "
        f"(page / command line = {found['page_over_cli']:.2f}); the browser used "
        f"{100 * (found['browser_share_of_workers_cpu'] or 0):.1f} % of the workers' CPU time during its races"
    )
    if not args.no_files:
        out = args.out or new_results_dir("page-")
        out.mkdir(parents=True, exist_ok=True)
        (out / "page.json").write_text(json.dumps({"url": base, "verdict": found, "rows": rows}, indent=1) + "\n")
        print(f"wrote {out / 'page.json'}")


def _server_pid(base: str) -> int:
    """The pid of the server answering at `base` (its /stats), which must run on this machine."""
    from lab import loopback  # noqa: PLC0415

    with loopback.urlopen(f"{base}/stats", timeout=10) as reply:
        pid = int(json.loads(reply.read())["server"]["answered_by"]["pid"])
    if not psutil.pid_exists(pid):
        raise RuntimeError(f"{base} is not served from this machine: its CPU cannot be measured here")
    parent = psutil.Process(pid).parent()
    # A forked server's parent (lab/serve/supervisor.py) is the root of its process tree.
    return parent.pid if parent is not None and "server.py" in " ".join(parent.cmdline()) else pid


if __name__ == "__main__":
    sys.exit(main())
