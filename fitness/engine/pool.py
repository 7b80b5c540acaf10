"""Processes that run candidates: a clean zygote per pool, and a fresh child per conversation.

A pool has `size` slots; a caller takes one (waiting in order), gets a child freshly forked from
the pool's zygote (fitness.process.zygote), talks to it, and the child is killed when the slot is given
back. Each exchange runs under a watchdog that kills the child on a deadline or when its resident
memory passes the limit. When the child goes, everything it started goes too, daemons included
(no PID namespace holds it: CUDA does not start in one; fitness.process.reaper sweeps by its user
namespace and ancestry instead, killing through pidfds only processes proven its own), and a
candidate that left processes running, or (without a mount namespace) files in /dev/shm, fails
with a reason. A zygote that died is started again before the next fork.
"""
from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO

from fitness.common.messages import Ready, Request, Warm
from fitness.common.replies import P, Reply
from fitness.engine.forked_child import STARTUP_TIMEOUT_S, _tail
from fitness.engine.forked_child import ChildProcess as ChildProcess
from fitness.engine.forked_child import WorkerFailure as WorkerFailure
from fitness.engine.gpu_memory import ChildRole
from fitness.engine.sandbox import PROJECT_ROOT as ROOT  # the zygote starts in the project folder
from fitness.engine.sandbox import Sandbox, worker_env
from fitness.process import reaper

logger = logging.getLogger(__name__)

FORK_TIMEOUT_S = 60.0
# a caller's "stop waiting?", asked while it waits for a slot or a turn (a run that is stopping)
CancelCheck = Callable[[], bool]


_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="worker-spawner")  # lives as long as the engine


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
        self.pinned: reaper.Pinned | None = None  # the zygote, held by a pidfd (fitness.process.reaper)
        # names a candidate left in a /dev/shm shared with the machine, not provably its own
        # (fitness.engine.forked_child._ShmWatch): while one is there, every later candidate fails
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
        argv = self.sandbox.wrap([sys.executable, "-m", "fitness.process.zygote", str(theirs.fileno())], self.clean)
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


def raise_if_cancelled(cancel: CancelCheck | None) -> None:
    """Cancelled where the caller's cancel() says so (a stopping run)."""
    if cancel and cancel():
        raise Cancelled()


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




CANDIDATES = ChildRole()  # children that import candidates, admitted by no ledger


class WorkerPool:
    """`size` slots over one zygote; callers wait, in order, for a free slot."""

    def __init__(self, size: int, sandbox: Sandbox, interpret: bool, mem_limit_bytes: int,
                 triton_cache: str | None = None, spares: int = 0, role: ChildRole = CANDIDATES):
        """`role`: what the children are; a clean one never imports a candidate
        (fitness.engine.sandbox.worker_env), and where the role has the GPU's ledger
        (fitness.engine.gpu_memory), every child holds its need there while it lives.
        `spares`: children forked and with their device started ahead of need, each still used
        for one conversation only (H100: starting CUDA took ~1 s of every child's slot); as
        many are started at once (H100 builtin, one filler: the spares ran out and every child
        of the steady state still waited ~1 s for its device)."""
        self.role = role
        self.size = size
        self.spares = spares
        self._spare: list[ChildProcess] = []
        self._spare_cv = threading.Condition()
        self._fillers: list[threading.Thread] = []
        self._filling = 0  # children being forked and warmed now
        self._closed = False
        self.zygote = Zygote(sandbox, interpret, mem_limit_bytes, triton_cache, role.clean)
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
        self._ready: Ready | None = None  # the latest child's greeting (what the pool's children run on)

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
        ticket = self._admitted(cancel, order)
        t0 = time.monotonic()
        child = None
        failed = ""
        try:
            child = self._take_spare() or self.zygote.fork()
            if self.role.ledger is not None and ticket is not None:
                child.on_memory = functools.partial(self.role.ledger.observe, ticket)
            self._ready = child.ready or self._ready
            yield child
        except WorkerFailure as e:
            failed = str(e)
        finally:
            if child is not None:
                if child.dead:
                    self.restarts += 1
                child.close()
                if self.role.ledger is not None:
                    self.role.ledger.learn(self.role.name, child.gpu_peak)
            if self.role.ledger is not None and ticket is not None:
                self.role.ledger.release(ticket)
            self._give_back(t0)
        # what it left behind fails it too, or adds to why it failed
        note = "; ".join(filter(None, (failed, child.left_behind if child is not None else "")))
        if note:
            raise WorkerFailure(note)

    def _admitted(self, cancel: CancelCheck | None, order: float | None) -> int | None:
        """A slot, and where the GPU's memory is admitted, room for this role's child (its ticket):
        a slot refused memory is given back while it waits (fitness.engine.gpu_memory.try_admit)."""
        while True:
            self._take(cancel, order)
            ledger, role = self.role.ledger, self.role.name
            if ledger is None:
                return None
            ticket = ledger.try_admit(role)
            if ticket is not None:
                return ticket
            self._give_back(time.monotonic())
            ledger.wait_for_room(role, functools.partial(raise_if_cancelled, cancel))

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
            warmed = child.ask(Warm(), STARTUP_TIMEOUT_S)
        except WorkerFailure:
            return None, 0.0
        if warmed.error:
            child.close()
            return None, 0.0
        return child, warmed.phase_ms.get("device_start", 0.0) / 1e3

    def ask(self, req: Request[P], timeout_s: float, cancel: CancelCheck | None = None,
            order: float | None = None) -> Reply[P]:
        """One request to a fresh child, its reply typed (fitness.common.messages); raises
        WorkerFailure when the child failed."""
        with self.child(cancel, order) as child:
            return child.ask(req, timeout_s)

    def device(self, unknown: str = "") -> str:
        """What the pool's children run on, as they said; `unknown` before any did."""
        return self._ready.device if self._ready is not None else unknown

    def close(self) -> None:
        with self._spare_cv:
            self._closed = True
            spare, self._spare = self._spare, []
            self._spare_cv.notify_all()
        for child in spare:
            child.close()
        self.zygote.shutdown()
