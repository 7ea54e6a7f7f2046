"""/distributed across a network: Dask's scheduler and workers on hosts of their own (network namespaces).

Needs root and iproute2, as CI has; skipped with the reason elsewhere. The
cluster runs with Dask's timeouts made small (DaskTimeouts.quick(): a worker
not heard from for 5 s is dropped, a connection with nothing acknowledged
for 11 s is dead): with Dask's defaults (5 minutes, 30 s) a silent worker
would hold a test for half a minute or more, for nothing these tests check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bench.lib.hosts import ROLES, DaskTimeouts, HostCluster, Reply
from bench.lib.netns import PREFIX, Network, ours, pids_in, refusal, sweep
from lab import ROOT
from tests.procs import alive, processes, wait_for

pytestmark = pytest.mark.timeout(300)  # four hosts' processes start slowly while other suites load both cores

JOB_TIMEOUT = 8.0
TIMEOUTS = DaskTimeouts.quick()


def _can_build() -> str | None:
    reason = refusal()
    if reason is not None:
        return f"needs {reason}"
    try:
        with Network(("probe",)):
            return None
    except RuntimeError as error:
        return f"cannot build network namespaces here: {error}"


@pytest.fixture(scope="module")
def skip_reason() -> str | None:
    return _can_build()


@pytest.fixture
def hosts(tmp_path: Path, skip_reason: str | None) -> Iterator[HostCluster]:
    """A scheduler host, two worker hosts and the lab's host; every process and namespace gone afterwards."""
    if skip_reason:
        pytest.skip(skip_reason)
    seen: list[psutil.Process] = []
    with Network(ROLES) as net, HostCluster(net, tmp_path, TIMEOUTS) as cluster:
        cluster.start(["--process-pool", "1", "--job-timeout", f"{JOB_TIMEOUT:g}"])
        cluster.wait_for_workers(2)
        yield cluster
        seen += processes(pid for role in ROLES for pid in net.pids(role))
    _nothing_left(seen)


def _nothing_left(seen: list[psutil.Process]) -> None:
    """No namespace of this process's, no interface of ours in the root namespace, none of `seen` alive."""
    assert not ours(os.getpid()), "a namespace outlived its test"
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert f"{PREFIX}{os.getpid():x}-" not in links, links
    assert not [p.pid for p in seen if alive(p)]


def _burst(hosts: HostCluster, path: str, count: int) -> list[Reply]:
    futures = [hosts.client.submit(hosts.get, f"{path}&_={time.time()}-{i}", 120) for i in range(count)]
    return [future.result() for future in futures]


def test_a_burst_runs_on_both_worker_hosts(hosts: HostCluster) -> None:
    workers = {hosts.net[role].address for role in ("w1", "w2")}
    for _ in range(3):  # the scheduler may rightly give a whole burst to one worker while the other is busy
        replies = _burst(hosts, "/distributed/sleep?seconds=0.5", 8)
        assert [r.status for r in replies] == [200] * 8, [r.body for r in replies]
        seen = {r.body["worker"]["address"].removeprefix("tcp://").rsplit(":", 1)[0] for r in replies}
        assert seen <= workers  # the workers' own addresses on their hosts, not loopback
        if seen == workers:
            return
    pytest.fail(f"3 bursts, none on both worker hosts; the last ran on {seen}")


def test_a_silent_worker_costs_no_request_more_than_a_clear_answer(hosts: HostCluster) -> None:
    lab_pid = hosts.processes["lab"].pid
    futures = [hosts.client.submit(hosts.get, f"/distributed/sleep?seconds=1&_=cut{i}", 120) for i in range(8)]
    assert wait_for(lambda: hosts.get("/stats").body["processes"][0]["pools"]["distributed"]["running"] > 0)
    hosts.net.cut("w1")  # silent: no RST, no FIN reaches anyone
    time.sleep(JOB_TIMEOUT + 2)  # past a stuck task's deadline, before Dask's TCP timeout (11 s) gives up
    hosts.net.mend("w1")
    replies = [future.result() for future in futures]
    for reply in replies:
        assert reply.status in (200, 503), reply.body
        if reply.status == 503:
            assert reply.headers.get("Retry-After") and "retry" in reply.body["error"]["message"]
        # Nothing waits past its deadline plus the time Dask takes to drop a silent worker (about 12 s here).
        assert reply.seconds < JOB_TIMEOUT + TIMEOUTS.detection_s() + 10, (reply.seconds, reply.body)
    # The same lab (not restarted) serves again, from the worker host that was cut off too.
    w1 = f"tcp://{hosts.net['w1'].address}:"

    def w1_serves() -> bool:
        # Two at once: Dask gives a task for any worker to an idle one, round-robin on its count of tasks, so
        # requests sent one after another (a constant count) can all go to the same worker; two at once, to both.
        burst = [hosts.client.submit(hosts.get, f"/distributed/sleep?seconds=0.2&_={time.time()}-{i}", 30)
                 for i in range(2)]  # fmt: skip
        replies = [request.result() for request in burst]
        return any(r.status == 200 and r.body["worker"]["address"].startswith(w1) for r in replies)

    assert wait_for(w1_serves, timeout=90), hosts.log("w1")
    assert hosts.processes["lab"].pid == lab_pid and hosts.processes["lab"].poll() is None


def test_a_network_and_its_processes_are_gone_after_close(tmp_path: Path, skip_reason: str | None) -> None:
    if skip_reason:
        pytest.skip(skip_reason)
    seen: dict[int, psutil.Process] = {}
    with Network(("sched", "w1")) as net:
        process = net.run("w1", ["sleep", "600"])
        net.run("sched", ["sh", "-c", "sleep 600 & sleep 600"])  # a child that is no process of ours
        assert wait_for(lambda: len(net.pids("sched")) >= 2)  # the shell (unless it exec'd the last) and its two
        for role in ("sched", "w1"):
            seen.update((p.pid, p) for p in processes(net.pids(role)))
        names = ours(os.getpid())
        assert len(names) == 3  # two hosts and the switch
    process.wait(10)
    assert not set(names) & set(ours())
    _nothing_left(list(seen.values()))


def test_a_killed_runs_leftovers_are_swept(skip_reason: str | None) -> None:
    if skip_reason:
        pytest.skip(skip_reason)
    gone = subprocess.Popen(["true"])
    gone.wait()
    name = f"{PREFIX}-{gone.pid:x}-0-orphan"  # as a run that was SIGKILLed leaves it
    link = f"{PREFIX}{gone.pid:x}-0a"  # and a cable left in this namespace
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "link", "add", link, "type", "veth", "peer", "name", f"{link[:-1]}b"], check=True)
        inside = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"])
        assert wait_for(lambda: pids_in(name) == [inside.pid])
        if psutil.pid_exists(gone.pid):
            pytest.skip("the dead run's pid was taken again already")
        swept = sweep()
        assert name in swept and link in swept
        assert inside.wait(10) == -signal.SIGKILL
        assert name not in ours()
        shown = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True, text=True).stdout
        assert link not in shown
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", link], check=False, capture_output=True)


def test_ctrl_c_mid_run_leaves_no_namespace_and_no_process(skip_reason: str | None) -> None:
    if skip_reason:
        pytest.skip(skip_reason)
    tool = subprocess.Popen(
        [sys.executable, "-m", "bench.cluster", "--quick", "--parts", "faults", "--no-files"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen: dict[int, psutil.Process] = {}

    def scheduler_runs() -> bool:
        for name in ours(tool.pid):
            seen.update((p.pid, p) for p in processes(pids_in(name)))
        return any(name.endswith("-sched") and pids_in(name) for name in ours(tool.pid))

    try:
        assert wait_for(scheduler_runs, timeout=120), tool.stderr
        tool.send_signal(signal.SIGINT)
        _, err = tool.communicate(timeout=60)
    finally:
        if tool.poll() is None:
            tool.kill()
    assert tool.returncode == 130, err
    assert ours(tool.pid) == []
    assert not [p.pid for p in seen.values() if alive(p)]
