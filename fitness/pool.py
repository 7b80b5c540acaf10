"""Processes that run candidates: a clean zygote per pool, and a fresh child per conversation.

A pool has `size` slots; a caller takes one (waiting in order), gets a child freshly forked from
the pool's zygote (fitness.zygote), talks to it, and the child is killed when the slot is given
back. Each exchange runs under a watchdog that kills the child on a deadline or when its resident
memory passes the limit. When the child goes, everything it started goes too, daemons included
(no PID namespace holds it: CUDA does not start in one; fitness.reaper sweeps by its user
namespace and ancestry instead, killing through pidfds only processes proven its own), and a
candidate that left processes running, or (without a mount namespace) files in /dev/shm, fails
with a reason. A zygote that died is started again before the next fork.
"""
from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from fitness import protocol, reaper
from fitness.sandbox import Sandbox, worker_env
from fitness.watch import WATCHDOG, Watched

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 180.0
FORK_TIMEOUT_S = 60.0
LOG_TAIL = 3000
# a caller's "stop waiting?", asked while it waits for a slot or a turn (a run that is stopping)
CancelCheck = Callable[[], bool]


_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="worker-spawner")  # lives as long as the engine


class WorkerFailure(Exception):
    """The child died or was killed while serving a request; the message says why."""


class Cancelled(Exception):
    """The caller gave up waiting for a free slot (a run that is stopping)."""


class Zygote:
    """The pool's clean process; it forks children and runs nothing else."""

    def __init__(self, sandbox: Sandbox, interpret: bool, mem_limit_bytes: int, triton_cache: str | None = None,
                 clean: bool = False):
        self.sandbox, self.interpret, self.mem_limit = sandbox, interpret, mem_limit_bytes
        self.triton_cache, self.clean = triton_cache, clean
        self.proc: subprocess.Popen | None = None
        self.ctl: socket.socket | None = None
        self._lock = threading.Lock()
        self.log: IO[bytes] | None = None
        self.shut = False  # closed for good: no fork starts it again
        self.pid: int | None = None  # as it said when ready (the sandbox's root is read through it)
        self.pinned: reaper.Pinned | None = None  # the zygote, held by a pidfd (fitness.reaper)
        # names a candidate left in a /dev/shm shared with the machine, not provably its own
        # (fitness.pool._ShmWatch): while one is there, every later candidate fails
        self.tainted_shm: set[str] = set()

    def shutdown(self) -> None:
        with self._lock:
            self.shut = True
            self.close()

    def _start(self) -> socket.socket:
        """Starts the zygote; its control socket, once it said it is ready."""
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()
        argv = self.sandbox.wrap([sys.executable, "-m", "fitness.zygote", str(theirs.fileno())], self.clean)
        env = worker_env(self.interpret, self.mem_limit, self.triton_cache, self.clean)
        # started from one long-lived thread: bubblewrap's --die-with-parent is a parent-death
        # signal, which Linux sends when the *thread* that started the child ends
        self.proc = _SPAWNER.submit(subprocess.Popen, argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                    stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                    start_new_session=True).result()
        theirs.close()
        self.ctl = ours
        self.ctl.settimeout(STARTUP_TIMEOUT_S)
        try:
            hello = json.loads(self.ctl.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as e:
            hello = {"error": str(e)}
        if hello.get("op") != "ready":
            note = _tail(self.log)
            self.close()
            raise WorkerFailure(f"the zygote did not start ({hello.get('error', 'it exited')}); last output:\n{note}")
        self.pid = hello.get("pid") if isinstance(hello.get("pid"), int) else self.proc.pid
        self.pinned = _pin_zygote(self.pid, self.proc.pid)
        if self.pinned is None:
            self.close()
            raise WorkerFailure(f"the zygote (pid {self.pid}) could not be pinned as this pool's process")
        return ours

    def fork(self) -> ChildProcess:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log = tempfile.TemporaryFile()
        try:
            with self._lock:
                if self.shut:
                    raise WorkerFailure("the pool is closed")
                ctl = self.ctl
                if ctl is None or self.proc is None or self.proc.poll() is not None:
                    ctl = self._start()
                ctl.settimeout(FORK_TIMEOUT_S)
                try:
                    socket.send_fds(ctl, [b"fork"], [b.fileno(), log.fileno()])
                    reply = json.loads(ctl.recv(1 << 16) or b"{}")
                except (OSError, ValueError) as e:
                    logger.warning("zygote stopped answering (%s); starting it again", e)
                    self.close()
                    raise WorkerFailure(f"the zygote stopped answering ({e}); it is started again") from None
            if "pid" not in reply:
                raise WorkerFailure(f"the zygote refused a fork: {reply}")
        finally:
            b.close()
        child = ChildProcess(a, log, int(reply["pid"]), self.mem_limit, self.pinned, self.tainted_shm)
        try:
            child.hello()
        except WorkerFailure:
            child.close()
            raise
        return child

    def close(self) -> None:
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
        if self.pinned is not None:
            os.close(self.pinned.fd)
            self.pinned = None
        if self.proc is not None:
            if self.proc.poll() is None:  # not reaped: its pid (and group) are still its own
                _kill_group(self.proc.pid)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None


def _pin_zygote(pid: int, launcher: int) -> reaper.Pinned | None:
    """The zygote pinned, where it is the launcher itself or runs below it (bubblewrap's)."""
    p = reaper.pin(pid)
    if p is None:
        return None
    up, hops = pid, 0
    while up not in (launcher, 0, 1) and hops < 4:
        st = reaper.stat_of(up)
        up, hops = (st[1] if st else 0), hops + 1
    if up == launcher and reaper.is_live(p):
        return p
    os.close(p.fd)
    return None


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def _tail(log: IO[bytes]) -> str:
    try:
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - LOG_TAIL))
        return log.read().decode(errors="replace").strip()
    except (OSError, ValueError):
        return ""


class ChildProcess:
    """One forked child and its conversation with the engine."""

    def __init__(self, conn: socket.socket, log: IO[bytes], pid: int, mem_limit: int,
                 zygote: reaper.Pinned | None = None, tainted_shm: set[str] | None = None):
        self.conn, self.log, self.pids, self.mem_limit = conn, log, [pid], mem_limit
        self.info: dict = {}
        self.dead = False
        self.zygote = zygote
        # the zygote's direct child, pinned while it is provably the zygote's; until the child
        # said hello it marks the child's processes by their ancestry
        self.reaper = reaper.pin(pid, zygote) if zygote is not None else None
        self.child: reaper.Pinned | None = None
        self.marker = reaper.Marker(None, self.reaper)
        self._reaper_lived = True  # whether the reaper was alive when the child was first killed
        self._shm = _ShmWatch(zygote.pid if zygote else None, set() if tainted_shm is None else tainted_shm)
        self.left_behind = ""  # why the candidate fails for what it left (processes, files)

    def hello(self) -> None:
        if self.reaper is None:
            self.kill()
            raise WorkerFailure(f"the child's reaper (pid {self.pids[0]}) could not be pinned as the zygote's "
                                "child; not used")
        self.info = self._exchange(None, STARTUP_TIMEOUT_S, "starting")
        if isinstance(self.info.get("pid"), int):
            self.pids.append(self.info["pid"])
            # read now, before any of the candidate's code runs in the child
            self.child = reaper.pin(self.pids[-1], self.reaper)
            self.marker = reaper.marker_of(self.reaper, self.child, self.zygote.pid if self.zygote else None)
        if self.child is None:
            self.kill()
            raise WorkerFailure("the child's process could not be pinned as its reaper's child; not used")

    def request(self, msg: dict, timeout_s: float) -> dict:
        if self.dead:
            raise WorkerFailure("the child was already killed")
        # a fresh nonce per request, echoed in the reply: a frame the candidate wrote into the
        # channel itself (a forged or extra reply) cannot pass for the child's answer
        nonce = secrets.token_hex(8)
        reply = self._exchange({**msg, "nonce": nonce}, timeout_s, msg.get("op", "request"))
        if reply.get("nonce") != nonce:
            self.kill()
            raise WorkerFailure("the child's channel carried a reply to no request (written by the candidate?); "
                                "child killed")
        if reply.get("fatal"):
            self.kill()  # a CUDA fault poisons the context: nothing more from this process
        return reply

    def _exchange(self, msg: dict | None, timeout_s: float, what: str) -> dict:
        watched = Watched(self.pids, time.monotonic() + timeout_s, timeout_s, self.mem_limit, self.kill)
        key = WATCHDOG.add(watched)
        try:
            if msg is not None:
                protocol.send(self.conn.fileno(), msg)
            reply = protocol.recv(self.conn.fileno(), max_bytes=max(8 << 30, self.mem_limit))
        except Exception as e:  # noqa: BLE001 - a reply that does not decode is the child's failure
            WATCHDOG.remove(key)
            note = watched.why[0] if watched.why else self._death_note(what, e)
            self.kill()
            raise WorkerFailure(note) from None
        WATCHDOG.remove(key)
        if watched.why:  # killed as its reply came: the deadline had passed all the same
            raise WorkerFailure(watched.why[0])
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerFailure("child sent a malformed reply")
        return reply

    def _death_note(self, what: str, err: Exception) -> str:
        time.sleep(0.3)  # the intermediate process writes how the child ended into the log
        log = _tail(self.log)
        ended = [ln for ln in log.splitlines() if ln.startswith("[te-exit] ")]
        cause = ended[-1].removeprefix("[te-exit] ") if ended else f"channel closed: {err}"
        rest = "\n".join(ln for ln in log.splitlines() if not ln.startswith("[te-exit] "))
        return f"worker crashed while {what} ({cause}); last output:\n{rest}"

    def kill(self) -> None:
        """The child (its reaper where the child is not known yet), through its pidfd: a pid
        alone may be another process's by now. What it started is swept by close()."""
        if not self.dead:
            self._reaper_lived = reaper.alive(self.reaper)
        self.dead = True
        target = self.child or self.reaper
        if target is not None:
            reaper.kill(target)
        try:
            self.conn.close()
        except OSError:
            pass

    def close(self) -> None:
        held = self._shm.held_by(self.marker, self.child) if self.marker.user_ns is None else set()
        self.kill()
        swept = reaper.sweep(self.marker, spare=frozenset(self.pids[1:]))
        if self.reaper is not None:
            reaper.kill(self.reaper)
        shm = self._shm.note(held) if self.marker.user_ns is None else ""  # else /dev/shm was its own
        self.left_behind = "; ".join(filter(None, (self._leftover_note(swept), shm)))
        self.marker.close()  # closes the reaper's pidfd too
        if self.child is not None:
            os.close(self.child.fd)
            self.child = None
        self.reaper = None
        self.log.close()

    def _leftover_note(self, swept: reaper.Sweep) -> str:
        notes = []
        if swept.killed:
            notes.append(f"started {len(swept.killed)} process(es) that outlived its evaluation "
                         f"(a daemon?): {', '.join(swept.killed[:4])}; killed")
        if swept.left:
            notes.append(f"processes it started could not be killed: {swept.left[:8]}")
        if self.marker.user_ns is None and not self._reaper_lived:
            notes.append("could not verify that every process it started has ended: its child had no user "
                         "namespace to find them by, and the reaper they are re-parented to was killed")
        return "; ".join(notes)


class _ShmWatch:
    """Where a child could not take a mount namespace, its /dev/shm is its sandbox's: a tmpfs of
    this pool's own under bubblewrap, else the machine's. What appeared there during its
    conversation fails it (fail closed: a candidate whose conversation overlapped with the
    writer's fails as well). In the pool's own /dev/shm it is removed (only this pool's
    candidates write there); in the machine's, only what the candidate's own processes held open
    or mapped, and no other process did, is removed: the rest may be another program's (torch's
    shared memory, another run's), so it is left and named in the reason, and every later
    candidate of the pool fails while it is there (it could have been read)."""

    def __init__(self, zygote: int | None, tainted: set[str]):
        self.root = f"/proc/{zygote}/root/dev/shm" if zygote else "/dev/shm"
        self.tainted = tainted  # the pool's, shared by its children
        self.before = self._entries()
        try:
            self.private = os.stat(self.root).st_dev != os.stat("/dev/shm").st_dev
        except OSError:
            self.private = False

    def _entries(self) -> set[str]:
        try:
            return set(os.listdir(self.root))
        except OSError:
            return set()

    def held_by(self, marker: reaper.Marker, child: reaper.Pinned | None) -> set[str]:
        """Names in /dev/shm that the candidate's processes hold open or mapped (read before
        they are killed), and that no other readable process holds."""
        if self.private:
            return set()
        found = reaper.members(marker)
        ours = {p.pid: p for p in ([child] if child else [])} | found
        held: set[str] = set()
        for pid, p in ours.items():
            names = _shm_names(pid)
            if reaper.is_live(p):  # what was read is that process's
                held |= names
        reaper.release(found)
        if held:
            held -= set().union(*(_shm_names(int(n)) for n in os.listdir("/proc")
                                  if n.isdigit() and int(n) not in ours))
        return held

    def note(self, held: set[str]) -> str:
        """Removes what appeared since the fork and is provably the candidate's; says what."""
        now = self._entries()
        new = sorted(now - self.before)
        self.tainted &= now  # gone since: no longer a channel
        seen = sorted(self.tainted & self.before)
        stale = (f"/dev/shm, shared with the machine, held {', '.join(seen[:4])} during its evaluation, left by "
                 "an earlier candidate and not removable (could have been read)") if seen else ""
        if not new:
            return stale
        gone = [n for n in new if (self.private or n in held) and _remove(os.path.join(self.root, n))]
        left = [n for n in new if n not in gone]
        where = "this pool's candidates" if self.private else "the whole machine"
        note = (f"/dev/shm gained {', '.join(new[:4])} during its evaluation, shared with {where} (no "
                "mount namespace of its own)")
        if gone:
            note += f"; removed {', '.join(gone[:4])} (its own)"
        if left:
            note += f"; left {', '.join(left[:4])} in place (not provably its own)"
            self.tainted.update(left)
        return "; ".join(filter(None, (note, stale)))


def _shm_names(pid: int) -> set[str]:
    """Names under /dev/shm that `pid` has open (/proc/PID/fd) or mapped (/proc/PID/maps)."""
    paths: set[str] = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                paths.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
        with open(f"/proc/{pid}/maps") as f:
            paths |= {ln.split(None, 5)[5].strip() for ln in f if "/dev/shm/" in ln}
    except (OSError, IndexError):
        pass
    return {p.removeprefix("/dev/shm/").removesuffix(" (deleted)").split("/")[0]
            for p in paths if p.startswith("/dev/shm/")}


def _remove(path: str) -> bool:
    try:
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        return True
    except OSError:
        return False


class WorkerPool:
    """`size` slots over one zygote; callers wait, in order, for a free slot."""

    def __init__(self, size: int, sandbox: Sandbox, interpret: bool, mem_limit_bytes: int,
                 triton_cache: str | None = None, clean: bool = False, spares: int = 0):
        """`clean`: for children that never import a candidate (fitness.sandbox.worker_env).
        `spares`: children forked and with their device started ahead of need, each still used
        for one conversation only (H100: starting CUDA took ~1 s of every child's slot); as
        many are started at once (H100 builtin, one filler: the spares ran out and every child
        of the steady state still waited ~1 s for its device)."""
        self.size = size
        self.spares = spares
        self._spare: list[ChildProcess] = []
        self._spare_cv = threading.Condition()
        self._fillers: list[threading.Thread] = []
        self._filling = 0  # children being forked and warmed now
        self._closed = False
        self.zygote = Zygote(sandbox, interpret, mem_limit_bytes, triton_cache, clean)
        self._free = threading.Condition()
        self._idle = size
        self._waiting: list[tuple] = []  # heap of (order, ticket): who is served next
        self._tickets = itertools.count()
        self.restarts = 0  # children killed for a failure (crash, hang, memory, fault)
        self.busy_s = 0.0  # summed time slots were held (a utilisation figure)
        # where spares are kept: how children came (warm from the spares, or forked when none was
        # ready) and the seconds the spares took to start their device (bench/evaluator_bench.py)
        self.served = {"spare": 0, "cold": 0}
        self.spare_start_s = 0.0
        self._info: dict = {}

    def _take(self, cancel: CancelCheck | None = None, order: float | None = None) -> None:
        """A free slot, served in `order` (default: arrival): with the timing slot saturated,
        waiters woken in no particular order left some starting kernels waiting a whole run."""
        me = (time.monotonic() if order is None else order, next(self._tickets))
        with self._free:
            heapq.heappush(self._waiting, me)
            try:
                while not (self._idle and self._waiting[0] == me):
                    if cancel and cancel():
                        raise Cancelled()
                    self._free.wait(0.2 if cancel else None)
            except BaseException:
                self._waiting.remove(me)
                heapq.heapify(self._waiting)
                self._free.notify_all()
                raise
            heapq.heappop(self._waiting)
            self._idle -= 1
            self._free.notify_all()

    def _give_back(self, t0: float) -> None:
        with self._free:
            self._idle += 1
            self.busy_s += time.monotonic() - t0
            self._free.notify_all()

    @contextlib.contextmanager
    def child(self, cancel: CancelCheck | None = None, order: float | None = None) -> Iterator[ChildProcess]:
        """A fresh child for one conversation, killed afterwards."""
        self._take(cancel, order)
        t0 = time.monotonic()
        child = None
        failed = ""
        try:
            child = self._take_spare() or self.zygote.fork()
            self._info = child.info or self._info
            yield child
        except WorkerFailure as e:
            failed = str(e)
        finally:
            if child is not None:
                if child.dead:
                    self.restarts += 1
                child.close()
            self._give_back(t0)
        # what it left behind fails it too, or adds to why it failed
        note = "; ".join(filter(None, (failed, child.left_behind if child is not None else "")))
        if note:
            raise WorkerFailure(note)

    def _take_spare(self) -> ChildProcess | None:
        if not self.spares:
            return None
        with self._spare_cv:
            if not self._fillers:
                self._fillers = [threading.Thread(target=self._fill_spares, daemon=True, name=f"spare-children-{i}")
                                 for i in range(self.spares)]
                for t in self._fillers:
                    t.start()
            while self._spare and self._spare[0].dead:
                self._spare.pop(0).close()
            child = self._spare.pop(0) if self._spare else None
            self.served["spare" if child is not None else "cold"] += 1
            self._spare_cv.notify_all()
            return child

    def _fill_spares(self) -> None:
        """Keeps `spares` children forked and warmed (device started), in the background."""
        while True:
            with self._spare_cv:
                while len(self._spare) + self._filling >= self.spares and not self._closed:
                    self._spare_cv.wait()
                if self._closed:
                    return
                self._filling += 1
            child, start_s = self._warmed_child()
            with self._spare_cv:
                self._filling -= 1
                self.spare_start_s += start_s
                if child is not None and self._closed:
                    child.close()
                    return
                if child is not None:
                    self._spare.append(child)
            if child is None:
                time.sleep(1.0)  # a zygote being restarted: the next fork starts it again

    def _warmed_child(self) -> tuple[ChildProcess | None, float]:
        """A forked child with its device started, and the seconds that start took."""
        try:
            child = self.zygote.fork()
            warmed = child.request({"op": "warm"}, STARTUP_TIMEOUT_S)
        except WorkerFailure:
            return None, 0.0
        if warmed.get("error"):
            child.close()
            return None, 0.0
        return child, (warmed.get("phase_ms") or {}).get("device_start", 0.0) / 1e3

    def request(self, msg: dict, timeout_s: float, cancel: CancelCheck | None = None,
                order: float | None = None) -> dict:
        """One request to a fresh child; raises WorkerFailure when the child failed."""
        with self.child(cancel, order) as child:
            return child.request(msg, timeout_s)

    def info(self) -> dict:
        return self._info

    def close(self) -> None:
        with self._spare_cv:
            self._closed = True
            spare, self._spare = self._spare, []
            self._spare_cv.notify_all()
        for child in spare:
            child.close()
        self.zygote.shutdown()
