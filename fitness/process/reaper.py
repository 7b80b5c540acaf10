"""Every process a candidate starts ends with its evaluation: found by a marker it cannot shed,
and killed only once it is proven to be the candidate's.

No PID namespace holds a candidate's child (CUDA does not start in one, bench/ns_probe.py; and a
process that unshares one cannot start threads), so a daemon (double fork, `setsid`) escapes
the child's process group and would outlive it. What it cannot escape:
- the child's user namespace, where the child has one (fitness.process.isolation): a process can enter
  a nested namespace but never go back to a parent one, so every process the candidate starts
  lives in the child's user namespace or in one below it (found through NS_GET_PARENT);
- its ancestry, while the child's reaper lives: the process between the zygote and the child is
  a subreaper (fitness.process.zygote), so an orphan is re-parented to it, not to init.
The engine sweeps /proc for both, after the child is killed, until none is left; the marker is
read by the engine when the child says hello, before any of the candidate's code has run.

Pids are reused within seconds on a busy machine (pid_max 32768), so a pid alone proves nothing:
every process is pinned by a pidfd (os.pidfd_open), what identifies it as the candidate's is read
from /proc after that, and the pidfd is checked to be still unreaped afterwards (then the pid
was that process's all along); the kill goes through the pidfd, which cannot reach a reused pid.
The marker holds the reaper's pidfd and start time and an open descriptor of the child's user
namespace (so that its inode cannot be given to another namespace while the marker lives).
"""
from __future__ import annotations

import fcntl
import os
import signal
import time
from dataclasses import dataclass, field

NS_GET_PARENT = 0xB702  # _IO(0xb7, 0x2): the owning parent of a user namespace
SWEEP_S = 5.0  # a fork loop racing the sweep is out of processes long before (RLIMIT_NPROC)


@dataclass(frozen=True)
class Pinned:
    """A process held by a pidfd, with its start time (field 22 of /proc/PID/stat)."""

    pid: int
    fd: int
    start: int


@dataclass
class Marker:
    """What identifies a child's processes: its user namespace ((st_dev, st_ino) of
    /proc/PID/ns/user, held open by `ns_fd`; None where it has none of its own) and its reaper
    (None where it could not be pinned)."""

    user_ns: tuple[int, int] | None
    reaper: Pinned | None
    ns_fd: int | None = None

    def close(self) -> None:
        for fd in (self.ns_fd, self.reaper.fd if self.reaper else None):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.ns_fd, self.reaper = None, None


@dataclass
class Sweep:
    """What a sweep found: the processes killed (pid and command line) and any it could not kill."""

    killed: list[str] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def stat_of(pid: int) -> tuple[bytes, int, int] | None:
    """State, parent and start time of `pid`, or None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[19])


def unreaped(fd: int) -> bool:
    """Whether the process behind a pidfd still holds its pid (alive or a zombie)."""
    try:
        signal.pidfd_send_signal(fd, 0)
        return True
    except OSError:
        return False


def pin(pid: int, parent: Pinned | None = None) -> Pinned | None:
    """`pid` pinned, where it is (still) a child of `parent` (None: any parent, e.g. ourselves)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    st = stat_of(pid)
    ok = st is not None and (parent is None or (st[1] == parent.pid and is_live(parent)))
    if ok and unreaped(fd):  # the /proc read above was of the pinned process
        assert st is not None
        return Pinned(pid, fd, st[2])
    os.close(fd)
    return None


def is_live(p: Pinned) -> bool:
    """The pinned process still holds its pid, with the start time it had when pinned."""
    st = stat_of(p.pid)
    return st is not None and st[2] == p.start and unreaped(p.fd)


def marker_of(reaper: Pinned | None, child: Pinned | None, zygote: int | None) -> Marker:
    """The child's marker; its user namespace counts only where it is not the zygote's (or ours)."""
    if child is None:
        return Marker(None, reaper)
    try:
        ns_fd = os.open(f"/proc/{child.pid}/ns/user", os.O_RDONLY)
    except OSError:
        return Marker(None, reaper)
    own = os.fstat(ns_fd)
    outer = _ns_id(zygote if zygote else os.getpid())
    if is_live(child) and outer is not None and (own.st_dev, own.st_ino) != outer:
        return Marker((own.st_dev, own.st_ino), reaper, ns_fd)
    os.close(ns_fd)
    return Marker(None, reaper)


def _ns_id(pid: int) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/proc/{pid}/ns/user")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _in_namespace(pid: int, target: tuple[int, int]) -> bool:
    """Whether `pid` lives in user namespace `target` or in one nested below it (each step held
    open, so no inode on the way can be a reused one)."""
    try:
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    except OSError:
        return False  # gone, or another user's (a candidate's processes all run as ours)
    try:
        while True:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == target:
                return True
            try:
                parent = fcntl.ioctl(fd, NS_GET_PARENT)
            except OSError:
                return False  # reached the top without passing through the child's namespace
            os.close(fd)
            fd = parent
    finally:
        os.close(fd)


def parents() -> dict[int, int]:
    """Every live process and its parent, as read now (a hint: nothing is killed on it alone)."""
    ppid: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat_of(int(name))
            if st is not None:
                ppid[int(name)] = st[1]
    return ppid


def _by_namespace(ppid: dict[int, int], target: tuple[int, int], found: dict[int, Pinned]) -> None:
    for pid in ppid:
        if pid in found or not _in_namespace(pid, target):  # a cheap first look, then pinned
            continue
        p = pin(pid)
        if p is None:
            continue
        if _in_namespace(pid, target) and is_live(p):  # the namespace read was the pinned one's
            found[pid] = p
        else:
            os.close(p.fd)


def _by_ancestry(ppid: dict[int, int], reaper: Pinned, found: dict[int, Pinned]) -> None:
    """Descendants of the reaper: a process counts where, after it is pinned, its parent is
    still a pinned member (or the reaper) that holds its pid."""
    children: dict[int, list[int]] = {}
    for pid, parent in ppid.items():
        children.setdefault(parent, []).append(pid)
    todo = [(pid, reaper) for pid in children.get(reaper.pid, [])]
    while todo:
        pid, up = todo.pop()
        p = found.get(pid) or pin(pid, up)
        if p is None:
            continue
        found[pid] = p
        todo += [(c, p) for c in children.get(pid, []) if c not in found]


def members(marker: Marker) -> dict[int, Pinned]:
    """The processes alive now that provably carry the marker (the reaper and this process
    excluded), each pinned; the caller closes their pidfds (release)."""
    ppid = parents()
    found: dict[int, Pinned] = {}
    if marker.user_ns is not None:
        _by_namespace(ppid, marker.user_ns, found)
    if marker.reaper is not None and is_live(marker.reaper):
        _by_ancestry(ppid, marker.reaper, found)
    for pid in [pid for pid, p in found.items() if pid == os.getpid() or _zombie(pid)
                or (marker.reaper is not None and pid == marker.reaper.pid)]:
        os.close(found.pop(pid).fd)
    return found


def release(found: dict[int, Pinned]) -> None:
    for p in found.values():
        try:
            os.close(p.fd)
        except OSError:
            pass


def _zombie(pid: int) -> bool:
    st = stat_of(pid)
    return st is None or st[0] in (b"Z", b"X")


def kill(p: Pinned) -> None:
    """SIGKILL through the pidfd: it reaches that process or none."""
    try:
        signal.pidfd_send_signal(p.fd, signal.SIGKILL)
    except OSError:
        pass


PF_EXITING = 0x4
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def alive(p: Pinned | None) -> bool:
    """Not gone, not a zombie, not exiting, no SIGKILL pending: a kill the candidate sent just
    before its reply counts as done (seen before the kernel had finished the process)."""
    if p is None or not is_live(p):
        return False
    try:
        with open(f"/proc/{p.pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{p.pid}/status") as f:
            pending = [int(ln.split()[1], 16) for ln in f if ln.startswith(("SigPnd:", "ShdPnd:"))]
    except OSError:
        return False
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0] in (b"Z", b"X") or int(fields[6]) & PF_EXITING:
        return False
    return not any(s & SIGKILL_BIT for s in pending) and is_live(p)


def command(p: Pinned) -> str:
    try:
        with open(f"/proc/{p.pid}/cmdline", "rb") as f:
            cmd = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())[:120]
    except OSError:
        return "?"
    return (cmd or "?") if is_live(p) else "?"


def sweep(marker: Marker, spare: frozenset[int] = frozenset(), limit_s: float = SWEEP_S) -> Sweep:
    """Kills every process carrying the marker, again and again until none is left; those in
    `spare` (the child itself) are killed too but not reported as left behind."""
    killed: dict[int, str] = {}
    deadline = time.monotonic() + limit_s
    quiet, left = 0, []
    while quiet < 2:  # two scans in a row find nothing: a fork under way has landed by then
        found = members(marker)
        quiet = 0 if found else quiet + 1
        for pid, p in found.items():
            if pid not in spare and pid not in killed:
                killed[pid] = command(p)
            kill(p)
        release(found)
        if time.monotonic() > deadline:
            rest = members(marker)
            left = sorted(rest)
            release(rest)
            break
        time.sleep(0.005 if found else 0.02)
    return Sweep([f"{pid} ({cmd})" for pid, cmd in killed.items()], left)
