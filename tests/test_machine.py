"""The cores really usable: affinity and the cgroup CPU quota, read from fixture cgroup trees (v1 and v2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import ROOT, machine
from lab.machine import Cores, cpu_quota, read_cores


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _v2(tmp_path: Path, limits: dict[str, str], member: str = "/app.slice/web.service") -> tuple[Path, Path]:
    """A cgroup v2 tree: cpu.max in each named folder, the process a member of `member`."""
    root = tmp_path / "cgroup"
    _write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    (root / member.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for folder, text in limits.items():
        _write(root / folder.lstrip("/") / "cpu.max", text)
    proc = tmp_path / "proc-cgroup"
    _write(proc, f"0::{member}\n")
    return root, proc


def _v1(tmp_path: Path, quota: str, period: str = "100000", member: str = "/docker/abc") -> tuple[Path, Path]:
    """A cgroup v1 tree with cpu and cpuacct mounted together, the quota in the process's own cgroup."""
    root = tmp_path / "cgroup"
    mount = root / "cpu,cpuacct"
    _write(mount / "cpu.cfs_quota_us", "-1\n")
    _write(mount / "cpu.cfs_period_us", "100000\n")
    _write(mount / member.lstrip("/") / "cpu.cfs_quota_us", f"{quota}\n")
    _write(mount / member.lstrip("/") / "cpu.cfs_period_us", f"{period}\n")
    proc = tmp_path / "proc-cgroup"
    _write(proc, f"12:memory:{member}\n4:cpu,cpuacct:{member}\n0::/\n")
    return root, proc


def test_cgroup_v2_quota_is_read_from_cpu_max(tmp_path: Path) -> None:
    root, proc = _v2(tmp_path, {"/app.slice/web.service": "150000 100000\n"})
    quota, source = cpu_quota(root, proc)
    assert quota == 1.5 and source.endswith("app.slice/web.service/cpu.max")


@pytest.mark.parametrize("own", ["max 100000\n", "150000 100000\n"])
def test_cgroup_v2_the_lowest_limit_on_the_way_up_binds(tmp_path: Path, own: str) -> None:
    root, proc = _v2(tmp_path, {"/app.slice/web.service": own, "/app.slice": "50000 100000\n", "/": "400000 100000\n"})
    quota, source = cpu_quota(root, proc)
    assert quota == 0.5 and source.endswith("app.slice/cpu.max")


def test_cgroup_v2_max_is_no_quota(tmp_path: Path) -> None:
    root, proc = _v2(tmp_path, {"/app.slice/web.service": "max 100000\n"})
    assert cpu_quota(root, proc)[0] is None


def test_cgroup_v2_a_container_that_sees_its_cgroup_as_the_root(tmp_path: Path) -> None:
    # The process's path (/kubepods/...) is the host's; the container's mount has its limit at the top.
    root, proc = _v2(tmp_path, {"/": "200000 100000\n"}, member="/")
    _write(proc, "0::/kubepods/burstable/pod1/abc\n")
    assert cpu_quota(root, proc)[0] == 2.0


def test_cgroup_v1_quota_over_period(tmp_path: Path) -> None:
    root, proc = _v1(tmp_path, "25000", "50000")
    quota, source = cpu_quota(root, proc)
    assert quota == 0.5 and source.endswith("docker/abc/cpu.cfs_quota_us")


def test_cgroup_v1_minus_one_is_no_quota(tmp_path: Path) -> None:
    root, proc = _v1(tmp_path, "-1")
    quota, source = cpu_quota(root, proc)
    assert quota is None and "no quota" in source


def test_no_cpu_controller_is_no_quota(tmp_path: Path) -> None:
    proc = tmp_path / "proc-cgroup"
    _write(proc, "1:name=systemd:/\n")
    assert cpu_quota(tmp_path, proc)[0] is None


@pytest.mark.parametrize(
    ("cores", "usable", "capacity", "differs"),
    [
        (Cores(64, 64, 2.0, "cpu.max"), 2, 2.0, True),
        (Cores(64, 64, 1.5, "cpu.max"), 2, 1.5, True),  # 1.5 cores' worth keeps two workers busy
        (Cores(8, 8, 0.25, "cpu.max"), 1, 0.25, True),
        (Cores(8, 4, None, "none"), 4, 4.0, True),  # taskset -c 0-3
        (Cores(8, 2, 6.0, "cpu.max"), 2, 2.0, True),  # a quota above the affinity does not bind
        (Cores(2, 2, None, "none"), 2, 2.0, False),
    ],
)
def test_usable_cores_and_when_they_differ_from_cpu_count(
    cores: Cores, usable: int, capacity: float, differs: bool
) -> None:
    assert cores.usable == usable and cores.capacity == capacity
    assert bool(cores.differences()) is differs


def test_cpu_count_sizes_by_the_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, proc = _v2(tmp_path, {"/app.slice/web.service": "100000 100000\n"})
    monkeypatch.setattr(machine, "CGROUP_ROOT", root)
    monkeypatch.setattr(machine, "PROC_CGROUP", proc)
    assert machine.cpu_count() == 1


def test_this_machine_reads_what_the_kernel_says() -> None:
    cores = read_cores()
    assert (cores.visible, cores.affinity) == (os.cpu_count(), len(os.sched_getaffinity(0)))
    assert (cores.quota, cores.quota_source) == cpu_quota()
    assert machine.cpu_count() == cores.usable


PINNED = """
import json, os
from lab import machine
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
cores = machine.read_cores()
print(json.dumps({"affinity": cores.affinity, "visible": cores.visible, "usable": cores.usable,
                  "cpu_count": machine.cpu_count(), "differences": cores.differences()}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to pin away")
def test_a_process_pinned_to_one_cpu_sizes_by_one() -> None:
    done = subprocess.run([sys.executable, "-c", PINNED], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True)  # fmt: skip
    read = json.loads(done.stdout)
    assert (read["affinity"], read["usable"], read["cpu_count"], read["visible"]) == (1, 1, 1, os.cpu_count())
    assert f"this process may run on 1 of the host's {os.cpu_count()} CPUs (its affinity)" in read["differences"]
