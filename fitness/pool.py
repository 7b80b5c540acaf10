"""Long-lived worker processes, watched and replaced when a candidate breaks one.

Importing torch takes seconds, so workers serve many candidates. Each request runs under a
watchdog that kills the worker's whole process group on a deadline or when its resident memory
passes the limit; a worker that crashed, hung, faulted on the GPU or served `recycle_every`
candidates is replaced before its next request.
"""
from __future__ import annotations

import heapq
import itertools
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fitness import protocol
from fitness.sandbox import Sandbox, worker_env

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 180.0
LOG_TAIL = 3000


_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="worker-spawner")  # lives as long as the engine


class WorkerFailure(Exception):
    """The worker died or was killed while serving a request; the message says why."""


class Cancelled(Exception):
    """The caller gave up waiting for a free worker (a run that is stopping)."""


class WorkerProcess:
    def __init__(self, sandbox: Sandbox, interpret: bool, mem_limit_bytes: int, triton_cache: str | None = None):
        self.sandbox = sandbox
        self.triton_cache = triton_cache
        self.interpret = interpret
        self.mem_limit = mem_limit_bytes
        self.proc = None
        self.served = 0
        self.info: dict = {}

    def start(self):
        self.info = {}  # the last worker's pid must not be signalled if this start fails
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self.log = tempfile.TemporaryFile()
        argv = self.sandbox.wrap([sys.executable, "-m", "fitness.worker", str(to_child_r), str(from_child_w)])
        env = worker_env(self.interpret, self.mem_limit, self.triton_cache)
        # started from one long-lived thread: bubblewrap's --die-with-parent is a parent-death
        # signal, which Linux sends when the *thread* that started the child ends, so a worker
        # (re)started from a short-lived thread was SIGKILLed when that thread finished
        self.proc = _SPAWNER.submit(subprocess.Popen, argv, pass_fds=(to_child_r, from_child_w),
                                    stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT,
                                    env=env, start_new_session=True).result()
        os.close(to_child_r)
        os.close(from_child_w)
        self.info = self._exchange(None, STARTUP_TIMEOUT_S, "starting")
        self.served = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, msg: dict, timeout_s: float) -> dict:
        if not self.alive:
            self.start()
        self.served += 1
        # a fresh nonce per request, echoed in the reply: a frame the candidate wrote into the
        # channel itself (a forged or extra reply) cannot pass for the worker's answer
        nonce = secrets.token_hex(8)
        reply = self._exchange({**msg, "nonce": nonce}, timeout_s, msg.get("op", "request"))
        if reply.get("nonce") != nonce:
            self.kill()
            raise WorkerFailure("the worker's channel carried a reply to no request (written by the candidate?); "
                                "worker killed")
        return reply

    def _exchange(self, msg, timeout_s, what) -> dict:
        done = threading.Event()
        why: list[str] = []
        watchdog = threading.Thread(target=self._watch, args=(done, time.monotonic() + timeout_s, why, timeout_s),
                                    daemon=True)
        watchdog.start()
        try:
            if msg is not None:
                protocol.send(self._to_child, msg)
            # a reply can be as large as the worker may grow (KernelBench's largest outputs are GBs)
            reply = protocol.recv(self._from_child, max_bytes=max(8 << 30, self.mem_limit))
        except Exception as e:  # noqa: BLE001 - a reply that does not decode is the worker's failure
            done.set()
            watchdog.join()
            note = why[0] if why else self._death_note(what, e)
            self.kill()
            raise WorkerFailure(note) from None
        done.set()
        watchdog.join()
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerFailure("worker sent a malformed reply")
        return reply

    def _watch(self, done: threading.Event, deadline: float, why: list, timeout_s: float):
        pid = None
        while not done.wait(0.1):
            if time.monotonic() > deadline:
                why.append(f"timed out after {timeout_s:.0f} s (hang or infinite loop); worker killed")
                self.kill()
                return
            pid = pid or self.info.get("pid")
            rss = _rss_bytes(pid) if pid else 0
            if self.mem_limit and rss > self.mem_limit:
                why.append(f"used {rss / 2**30:.1f} GiB of host memory, over the "
                           f"{self.mem_limit / 2**30:.1f} GiB limit; worker killed")
                self.kill()
                return

    def _death_note(self, what: str, err: Exception) -> str:
        try:
            code = self.proc.wait(timeout=10) if self.proc else None
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code > 128 and self.sandbox.isolated:
            code = 128 - code  # bubblewrap reports a child killed by signal N as 128 + N
        if code is not None and code < 0:
            cause = f"killed by signal {signal.Signals(-code).name}"
        else:
            cause = f"exited with code {code}" if code is not None else f"channel error: {err}"
        return f"worker crashed while {what} ({cause}); last output:\n{self.log_tail()}"

    def log_tail(self) -> str:
        try:
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - LOG_TAIL))
            return self.log.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def kill(self):
        self.send_kill()
        self.reap()

    def send_kill(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        pid = self.info.get("pid")
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def reap(self):
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc = None

    def close(self):
        self.kill()


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class WorkerPool:
    """`size` interchangeable workers; callers block until one is free. A request goes to a free
    worker that last served the same task when there is one: its input cache already holds
    that task's inputs, which are slow to draw."""

    def __init__(self, size: int, sandbox: Sandbox, interpret: bool, mem_limit_bytes: int, recycle_every: int,
                 triton_cache: str | None = None):
        self.recycle_every = recycle_every
        self.workers = [WorkerProcess(sandbox, interpret, mem_limit_bytes, triton_cache) for _ in range(size)]
        self._idle = list(self.workers)  # longest idle first
        self._free = threading.Condition()
        self._waiting: list[tuple] = []  # heap of (order, ticket): who is served next
        self._tickets = itertools.count()
        self._last_task: dict[int, str] = {}
        self.restarts = 0
        self.busy_s = 0.0  # summed time workers spent serving requests (a utilisation figure)

    def _take(self, task_key: str, cancel=None, order: float | None = None) -> WorkerProcess:
        """A free worker, served in `order` (default: arrival). Waiters used to wake in no
        particular order, and with the timing worker saturated some starting kernels waited the
        whole run (seen on the H100: 4 of 14 TritonBench tasks not started after 390 s)."""
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
                self._free.notify_all()  # the next in line may be free to go now
                raise
            heapq.heappop(self._waiting)
            worker = next((w for w in self._idle if self._last_task.get(id(w)) == task_key), self._idle[0])
            self._idle.remove(worker)
            self._last_task[id(worker)] = task_key
            self._free.notify_all()  # another idle worker: the next in line may take it
            return worker

    def _give_back(self, worker: WorkerProcess):
        with self._free:
            self._idle.append(worker)
            self._free.notify_all()

    def request(self, msg: dict, timeout_s: float, cancel=None, order: float | None = None) -> dict:
        """Reply of a worker, or raises WorkerFailure (that worker is then replaced). `cancel()`
        true while waiting for a free worker raises Cancelled; a request once sent runs to its end.
        `order`: callers waiting for a worker are served lowest first (a time.monotonic() value,
        e.g. when the candidate's evaluation began), else in order of arrival."""
        worker = self._take(repr(msg.get("task")), cancel, order)
        t0 = time.monotonic()
        try:
            if worker.alive and worker.served >= self.recycle_every:
                worker.kill()
            if not worker.alive and worker.proc is None and worker.info:
                self.restarts += 1
            reply = worker.request(msg, timeout_s)
            if reply.get("fatal"):
                worker.kill()  # a CUDA fault poisons the context: never reuse this process
            return reply
        finally:
            with self._free:
                self.busy_s += time.monotonic() - t0
            self._give_back(worker)

    def info(self) -> dict:
        for w in self.workers:
            if w.info:
                return w.info
        return {}

    def close(self):
        # every worker signalled first, then waited for: a process stuck in the GPU driver can
        # take seconds to go, and one after another that added up to minutes
        for w in self.workers:
            w.send_kill()
        for w in self.workers:
            w.reap()
