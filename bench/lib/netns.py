"""Hosts on one machine: network namespaces joined by a switch, links that can be cut or narrowed, torn down always.

    with Network(("sched", "w1", "w2", "lab")) as net:       # needs root and iproute2 (`refusal()` says)
        net.run("sched", ["dask", "scheduler", ...])          # a process on that host
        net.cut("w1"); net.mend("w1")                         # the cable out, silently, and back
        net.shape("w1", "10mbit"); net.shape("w1", None)      # a narrow link (tbf), and unlimited again

Each host is a namespace with one veth cable to a switch: a bridge in a
namespace of its own, so that nothing of the network (no address, no route,
no interface) touches the root namespace. Addresses are private (10.31.0.0/24)
and exist only inside the namespaces. A cut sets the switch's end of the
cable down: the host's packets go nowhere and nobody is told (no RST, no
FIN, no ICMP), which is how a pulled cable or a dead switch port looks to
TCP. tc's tbf on both ends of a cable narrows it both ways (netem, for delay,
is not in every kernel: this module needs none).

Every name carries the owner's pid (`clu-<pid>-...`), so a run that was
SIGKILLed leaves names that the next run's `sweep()` recognises as orphans
and removes, and two runs at once never touch each other's. `close()` (also
on leaving the `with`) kills every process inside the namespaces and deletes
them, with SIGINT and SIGTERM held off until it is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psutil

PREFIX = "clu"
SUBNET = "10.31.0"
# One host's address per role; any other role gets the next free one from 100 up.
ADDRESSES = {"sched": 1, "lab": 2, "w1": 11, "w2": 12}
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
_NAME = re.compile(rf"^{PREFIX}-([0-9a-f]+)-")  # a namespace: clu-<owner pid>-<serial>-<role>
_LINK = re.compile(rf"^{PREFIX}([0-9a-f]+)-")  # an interface: clu<owner pid>-<serial><end>
_serial = iter(range(1 << 30))
_libc = ctypes.CDLL(None, use_errno=True)


def refusal() -> str | None:
    """Why hosts cannot be built here (one line), or None: needs root and iproute2's `ip netns`."""
    if os.geteuid() != 0:
        return "root, to build network namespaces (ip netns add): run it as root or with sudo"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2's ip and tc (apt-get install iproute2)"
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"`ip netns` to work ({done.stderr.strip() or 'it failed'})"
    return None


def ip(*argv: str, check: bool = True) -> str:
    """Run `ip ARGV...`; its output. With `check`, a failure raises RuntimeError with ip's own words."""
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def namespaces() -> list[str]:
    """Every named network namespace on the machine."""
    return [line.split()[0] for line in ip("netns", "list", check=False).splitlines() if line.strip()]


def ours(pid: int | None = None) -> list[str]:
    """Namespaces this module made for process `pid` (default: any process)."""
    found = []
    for name in namespaces():
        match = _NAME.match(name)
        if match and (pid is None or int(match.group(1), 16) == pid):
            found.append(name)
    return found


def pids_in(namespace: str) -> list[int]:
    """Processes whose network namespace is `namespace` (`ip netns pids`)."""
    return [int(pid) for pid in ip("netns", "pids", namespace, check=False).split() if pid.isdigit()]


def _kill_inside(namespace: str) -> None:
    for pid in pids_in(namespace):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def remove(namespace: str) -> None:
    """Kill whatever runs inside `namespace`, then delete it (its veth ends go with it)."""
    _kill_inside(namespace)
    ip("netns", "del", namespace, check=False)


def sweep() -> list[str]:
    """Remove namespaces of ours whose owner process is gone (a run that was SIGKILLed), and any interface of
    theirs left in this namespace (none is made here; a kernel that ignored `netns` on creation would); names."""
    orphans = []
    for name in ours():
        match = _NAME.match(name)
        if match and not psutil.pid_exists(int(match.group(1), 16)):
            remove(name)
            orphans.append(name)
    for line in ip("-o", "link", "show", check=False).splitlines():
        link = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
        match = _LINK.match(link)
        if match and not psutil.pid_exists(int(match.group(1), 16)):
            ip("link", "del", link, check=False)
            orphans.append(link)
    return orphans


def enter(namespace: str) -> None:
    """Move the calling thread (only it, and the threads it starts later) into `namespace`'s network."""
    fd = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns into {namespace}: {os.strerror(error)}")
    finally:
        os.close(fd)


def threads_in(namespace: str, workers: int) -> ThreadPoolExecutor:
    """A thread pool whose every thread lives in `namespace`: its sockets reach that host's network."""
    return ThreadPoolExecutor(workers, thread_name_prefix=f"in-{namespace}", initializer=enter, initargs=(namespace,))


@dataclass(frozen=True)
class Host:
    """One host: its namespace, address, and the two ends of its cable (`nic` inside it, `port` on the switch)."""

    role: str
    namespace: str
    address: str
    nic: str
    port: str


class Network:
    """Hosts (one per role) on a switch; `close()` removes it all. Build it with `with` or `build()`."""

    def __init__(self, roles: Sequence[str]) -> None:
        self.tag = f"{os.getpid():x}-{next(_serial):x}"
        self.switch = f"{PREFIX}-{self.tag}-switch"
        self.bridge = f"{PREFIX}{self.tag}br"[:15]
        spare = iter(range(100, 250))
        self.hosts: dict[str, Host] = {}
        for i, role in enumerate(roles):
            number = ADDRESSES.get(role) or next(spare)
            cable = f"{PREFIX}{self.tag}{i}"[:14]  # + one letter: at most 15, the kernel's limit
            self.hosts[role] = Host(role, f"{PREFIX}-{self.tag}-{role}", f"{SUBNET}.{number}", f"{cable}h", f"{cable}s")
        self._made: list[str] = []  # namespaces, noted before they exist: close() deletes what it finds
        self._lock = threading.Lock()

    def build(self) -> Network:
        """Make the switch and every host, each cable plugged in and up; a failure half-way removes it all."""
        try:
            self._namespace(self.switch)
            ip("-n", self.switch, "link", "add", self.bridge, "type", "bridge")
            ip("-n", self.switch, "link", "set", self.bridge, "up")
            for host in self.hosts.values():
                self._plug(host)
        except BaseException:
            self.close()
            raise
        return self

    def _namespace(self, name: str) -> None:
        self._made.append(name)
        ip("netns", "add", name)
        ip("-n", name, "link", "set", "lo", "up")

    def _plug(self, host: Host) -> None:
        self._namespace(host.namespace)
        ip("link", "add", host.nic, "netns", host.namespace, "type", "veth", "peer", "name", host.port,
           "netns", self.switch)  # fmt: skip
        ip("-n", self.switch, "link", "set", host.port, "master", self.bridge, "up")
        ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.nic)
        ip("-n", host.namespace, "link", "set", host.nic, "up")

    def __getitem__(self, role: str) -> Host:
        return self.hosts[role]

    # ---------- what runs on a host ----------

    def command(self, role: str, argv: Sequence[str]) -> list[str]:
        """`argv` as run on host `role` (ip netns exec replaces itself with it: the pid is argv's)."""
        return ["ip", "netns", "exec", self.hosts[role].namespace, *argv]

    def run(self, role: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start `argv` on host `role`, in a session of its own."""
        return subprocess.Popen(self.command(role, argv), start_new_session=True, **popen)

    def pids(self, role: str) -> list[int]:
        return pids_in(self.hosts[role].namespace)

    def kill(self, role: str) -> list[int]:
        """SIGKILL every process on host `role`; their pids."""
        pids = self.pids(role)
        _kill_inside(self.hosts[role].namespace)
        return pids

    # ---------- the cable ----------

    def cut(self, role: str) -> None:
        """Pull host `role`'s cable at the switch: silent, nobody on either side is told."""
        ip("-n", self.switch, "link", "set", self.hosts[role].port, "down")

    def mend(self, role: str) -> None:
        ip("-n", self.switch, "link", "set", self.hosts[role].port, "up")

    def shape(self, role: str, rate: str | None) -> None:
        """Limit host `role`'s cable to `rate` (tc's units: "10mbit", "8kbit") both ways; None: unlimited."""
        host = self.hosts[role]
        for namespace, dev in ((host.namespace, host.nic), (self.switch, host.port)):
            _tc(namespace, "qdisc", "del", "dev", dev, "root", check=False)
            if rate is not None:
                _tc(namespace, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", _burst(rate),
                    "latency", "1s")  # fmt: skip

    def bytes(self, role: str) -> int:
        """Bytes that crossed host `role`'s cable so far, both ways (the switch end's counters)."""
        shown = json.loads(ip("-n", self.switch, "-s", "-j", "link", "show", self.hosts[role].port))
        stats = shown[0]["stats64"]
        return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])

    # ---------- the end ----------

    def close(self) -> None:
        """Kill every process in the namespaces and delete them; SIGINT and SIGTERM wait until it is done."""
        with self._lock, _signals_held():
            for name in reversed(self._made):
                remove(name)
            self._made.clear()

    def __enter__(self) -> Network:
        return self.build()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def _tc(namespace: str, *argv: str, check: bool = True) -> None:
    done = subprocess.run(["ip", "netns", "exec", namespace, "tc", *argv], capture_output=True, text=True,
                          check=False, timeout=30)  # fmt: skip
    if check and done.returncode != 0:
        raise RuntimeError(f"tc {' '.join(argv)} in {namespace}: {done.stderr.strip()}")


def rate_bits(rate: str) -> int:
    """tc's rate ("10mbit", "16kbit", "800bit") in bits per second."""
    match = re.fullmatch(r"(\d+)(k|m|g)?bit", rate)
    if match is None:
        raise ValueError(f"a rate like 10mbit or 16kbit, not {rate!r}")
    return int(match.group(1)) * {None: 1, "k": 10**3, "m": 10**6, "g": 10**9}[match.group(2)]


def _burst(rate: str) -> str:
    """tbf's bucket: a few packets at a crawl, about 10 ms of traffic when fast (tbf needs rate/HZ at least)."""
    return str(max(4 * 1514, rate_bits(rate) // 8 // 100))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done (a second Ctrl-C must not stop a teardown half-way).

    Python runs signal handlers in the main thread whichever thread the kernel
    picked, so swapping the handlers there holds them for the whole process.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []  # the signals that came meanwhile
    held = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum))
            for signum in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
        if arrived:
            signal.raise_signal(arrived[0])
