"""Every process a candidate starts ends with its evaluation: found by a marker it cannot shed.

No PID namespace holds a candidate's child (CUDA does not start in one, bench/ns_probe.py; and a
process that unshares one cannot start threads), so a daemon (double fork, `setsid`) escapes
the child's process group and would outlive it. What it cannot escape:
- the child's user namespace, where the child has one (fitness.isolation): a process can enter
  a nested namespace but never go back to a parent one, so every process the candidate starts
  lives in the child's user namespace or in one below it (found through NS_GET_PARENT);
- its ancestry, while the child's reaper lives: the process between the zygote and the child is
  a subreaper (fitness.zygote), so an orphan is re-parented to it, not to init.
The engine sweeps /proc for both, after the child is killed, until none is left; the marker is
read by the engine when the child says hello, before any of the candidate's code has run.
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
class Marker:
    """What identifies a child's processes: its own user namespace (the inode of
    /proc/PID/ns/user; None where it has none of its own) and its reaper's pid."""

    user_ns: int | None
    reaper: int


@dataclass
class Sweep:
    """What a sweep found: the processes killed (pid and command line) and any it could not kill."""

    killed: list[str] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def user_ns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/user").st_ino
    except OSError:
        return None


def marker_of(reaper: int, child: int, zygote: int | None) -> Marker:
    """The child's marker; its user namespace counts only where it is not the zygote's."""
    own = user_ns(child)
    outer = user_ns(zygote) if zygote else user_ns(os.getpid())
    return Marker(own if own is not None and own != outer and own == user_ns(reaper) else None, reaper)


def _in_namespace(pid: int, target: int, cache: dict[int, bool]) -> bool:
    """Whether `pid` lives in user namespace `target` or in one nested below it."""
    try:
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    except OSError:
        return False  # gone, or another user's (a candidate's processes all run as ours)
    seen: list[int] = []
    try:
        while True:
            ino = os.fstat(fd).st_ino
            if ino == target or ino in cache:
                found = ino == target or cache[ino]
                break
            seen.append(ino)
            try:
                parent = fcntl.ioctl(fd, NS_GET_PARENT)
            except OSError:
                found = False  # reached the top without passing through the child's namespace
                break
            os.close(fd)
            fd = parent
    finally:
        os.close(fd)
    cache.update(dict.fromkeys(seen, found))
    return found


def parents() -> dict[int, int]:
    """Every live process and its parent."""
    ppid: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    return ppid


def members(marker: Marker) -> set[int]:
    """The processes alive now that carry the marker (the reaper itself excluded)."""
    ppid = parents()
    found: set[int] = set()
    cache: dict[int, bool] = {}
    if marker.user_ns is not None:
        found = {pid for pid in ppid if _in_namespace(pid, marker.user_ns, cache)}
    # descendants of the reaper, by ancestry (the only marker where namespaces are refused)
    children: dict[int, list[int]] = {}
    for pid, parent in ppid.items():
        children.setdefault(parent, []).append(pid)
    todo = list(children.get(marker.reaper, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    found.discard(marker.reaper)
    found.discard(os.getpid())
    return {pid for pid in found if not _zombie(pid)}


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:][:1] in (b"Z", b"X")
    except OSError:
        return True


PF_EXITING = 0x4
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def alive(pid: int) -> bool:
    """Not gone, not a zombie, not exiting, no SIGKILL pending: a kill the candidate sent just
    before its reply counts as done (seen before the kernel had finished the process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status") as f:
            pending = [int(ln.split()[1], 16) for ln in f if ln.startswith(("SigPnd:", "ShdPnd:"))]
    except OSError:
        return False
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0] in (b"Z", b"X") or int(fields[6]) & PF_EXITING:
        return False
    return not any(p & SIGKILL_BIT for p in pending)


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())[:120] or "?"
    except OSError:
        return "?"


def sweep(marker: Marker, spare: frozenset[int] = frozenset(), limit_s: float = SWEEP_S) -> Sweep:
    """Kills every process carrying the marker, again and again until none is left; those in
    `spare` (the child itself) are killed too but not reported as left behind."""
    killed: dict[int, str] = {}
    deadline = time.monotonic() + limit_s
    quiet, left = 0, []
    while quiet < 2:  # two scans in a row find nothing: a fork under way has landed by then
        found = members(marker)
        quiet = 0 if found else quiet + 1
        for pid in found:
            if pid not in spare and pid not in killed:
                killed[pid] = command(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if time.monotonic() > deadline:
            left = sorted(members(marker))
            break
        time.sleep(0.005 if found else 0.02)
    return Sweep([f"{pid} ({cmd})" for pid, cmd in killed.items()], left)
