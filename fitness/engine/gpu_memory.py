"""Admission by GPU memory (issue 48): one evaluator's children share one GPU, and none starts a
conversation without room for it.

Measured on the H100 at 8ae4158: with 8 workers the red-team run filled the GPU's 80 GB; with 12,
five of 15 honest builtin starting kernels failed their timing in replay and baseline children
(CUDA out of memory), all of which time fine with 8. So:
- every child of a pool holds a reservation while it lives: its role's need, the largest peak
  (allocator reservation plus context) that role's recent children reported (`learn`); a child is
  admitted while the reservations and the memory the driver reports in use both leave room for
  it, or when no other transient child holds any (one conversation always runs: progress);
- a candidate's process has a cap (CANDIDATE_SHARE of the GPU, torch's allocator): a candidate
  allocating all memory fails in its own process, naming it;
- an out-of-memory error in a clean or baseline child, or in a candidate's process that stayed
  under its cap, is the evaluator's own: the evaluation runs that stage again `alone` (no other
  transient child admitted until it is done), and only a failure alone is the candidate's.
Persistent children (the measuring turn's baseline, the reference service) hold their
reservation across conversations and do not block running alone: the GPU holds them anyway.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from fitness.engine.gpu_busy import nvml_device

# a child's CUDA context, cuBLAS handle and loaded modules beside what its allocator reserves
# (H100, torch 2.11: nvidia-smi lists a child that reserved nothing at ~520 MiB)
CONTEXT_BYTES = 600 << 20
HEADROOM = 0.92  # the share of the GPU one evaluator's children may hold together
CANDIDATE_SHARE = 0.5  # a candidate process's allocator cap (TE_GPU_MEM_FRACTION)
DEFAULT_NEED = 2 << 30  # a role's need before any of its children reported a peak
RECENT = 16  # the peaks a role's need is the largest of
PERSISTENT = frozenset({"baseline", "reference"})
R = TypeVar("R")
OUT_OF_MEMORY = ("cuda out of memory", "outofmemoryerror", "cuda_error_out_of_memory",
                 "cudaerrormemoryallocation")


def out_of_memory(reason: str | None) -> bool:
    """Whether a failure's words are the device running out of memory (not of shared memory,
    which is a kernel's own build problem)."""
    low = (reason or "").lower()
    return any(m in low for m in OUT_OF_MEMORY)


class GpuMemory:
    """The reservations of one evaluator's children on its GPU (see the module's docstring)."""

    def __init__(self, total_bytes: int, used: Callable[[], int | None] = lambda: None,
                 headroom: float = HEADROOM):
        """`used`: the bytes the driver reports in use on the GPU now (every process's), or None."""
        self.total = total_bytes
        self.budget = int(total_bytes * headroom)
        self._used = used
        self._held: dict[int, tuple[str, int]] = {}
        self._ids = itertools.count()
        self._cv = threading.Condition()
        self._alone: int | None = None  # the thread running a stage alone
        self._queued_alone = 0  # threads waiting to: no new transient child is admitted meanwhile
        self._peaks: dict[str, deque[int]] = {}
        self.waited_s = 0.0  # summed time children waited for room
        self.alone_runs = 0  # stages run again alone after an out-of-memory error
        self.most_held = 0  # the largest sum of reservations at any moment

    def need(self, role: str) -> int:
        peaks = self._peaks.get(role)
        return max(peaks) if peaks else DEFAULT_NEED

    def learn(self, role: str, peak_bytes: int) -> None:
        """A child of `role` reported its peak (allocator reservation; the context is added here)."""
        if peak_bytes > 0:
            with self._cv:
                self._peaks.setdefault(role, deque(maxlen=RECENT)).append(self._bounded(role, peak_bytes))

    def _bounded(self, role: str, nbytes: int) -> int:
        """A child's report, plus its context, no more than its role's allocator can hold: a
        candidate's process reports its own memory, and a lie beyond its cap would hold back
        the children after it."""
        cap = self.total * (CANDIDATE_SHARE if role == "candidate" else 1.0)
        return int(min(max(int(nbytes), 0), cap)) + CONTEXT_BYTES

    @contextlib.contextmanager
    def admit(self, role: str, waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Held while a child of `role` lives: waits for room for its need first, calling
        `waiting()` every moment it waits (which raises to stop waiting: a cancelled run)."""
        ticket = self.try_admit(role)
        while ticket is None:
            self.wait_for_room(role, waiting)
            ticket = self.try_admit(role)
        try:
            yield
        finally:
            self.release(ticket)

    def try_admit(self, role: str) -> int | None:
        """A reservation of `role`'s need where there is room now (its ticket), else None. A pool
        asks this holding a slot and gives the slot back when refused: a stage running alone may
        need a slot that a child waiting for memory would otherwise keep."""
        need = self.need(role)
        with self._cv:
            if not self._room(role, need, threading.get_ident()):
                return None
            ticket = next(self._ids)
            self._held[ticket] = (role, need)
            self.most_held = max(self.most_held, sum(n for _, n in self._held.values()))
            return ticket

    def observe(self, ticket: int, held_bytes: int) -> None:
        """What a living child's allocator holds now: a transient child's reservation grows to it
        (never below its role's need: it will reach its peak again); a persistent child's is what
        it holds (the reference children give memory back when idle). H100, 12 workers: with
        persistent children reserved at their peaks the ledger held 91 GiB where the driver
        showed 65 GB in use, and children ran one at a time (20.6 candidates/min)."""
        with self._cv:
            if ticket in self._held:
                role, need = self._held[ticket]
                now = self._bounded(role, held_bytes)
                self._held[ticket] = (role, now if role in PERSISTENT else max(need, now))
                self.most_held = max(self.most_held, sum(n for _, n in self._held.values()))
                self._cv.notify_all()

    def set_aside(self, nbytes: int) -> None:
        """Memory outside any reservation (spare children's contexts, forked ahead of need)."""
        with self._cv:
            self.budget -= int(nbytes)

    def release(self, ticket: int) -> None:
        with self._cv:
            del self._held[ticket]
            self._cv.notify_all()

    def wait_for_room(self, role: str, waiting: Callable[[], None] | None = None) -> None:
        """Returns once a child of `role` would be admitted (another may take the room first)."""
        need, me = self.need(role), threading.get_ident()
        with self._cv:
            t0 = time.monotonic()
            while not self._room(role, need, me):
                if waiting is not None:
                    waiting()
                self._cv.wait(0.2)
            self.waited_s += time.monotonic() - t0

    def _room(self, role: str, need: int, me: int) -> bool:
        if role in PERSISTENT:
            return True  # made once and kept: the memory they take is the GPU's from then on
        if self._alone is not None:
            return self._alone == me
        if self._queued_alone:
            return False
        if not self._transient():
            return True
        held = sum(n for _, n in self._held.values())
        used = self._used()
        return held + need <= self.budget and (used is None or used + need <= self.budget)

    def _transient(self) -> bool:
        return any(r not in PERSISTENT for r, _ in self._held.values())

    @contextlib.contextmanager
    def alone(self, waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Held while a stage runs again with no other transient child on the GPU (`waiting`: as
        admit's)."""
        with self._cv:
            self._queued_alone += 1
            try:
                while self._alone is not None or self._transient():
                    if waiting is not None:
                        waiting()
                    self._cv.wait(0.2)
            finally:
                self._queued_alone -= 1
            self._alone = threading.get_ident()
            self.alone_runs += 1
        try:
            yield
        finally:
            with self._cv:
                self._alone = None
                self._cv.notify_all()


    def retried(self, stage: Callable[[], R], reasons: Callable[[R], Iterable[str | None]],
                waiting: Callable[[], None] | None = None) -> R:
        """The stage's result; where one of its failures' `reasons` is the GPU running out of
        memory, the stage run again alone, and that result (a neighbour's memory is not the
        candidate's fault; what fails alone is named by the caller)."""
        found = stage()
        if not any(out_of_memory(r) for r in reasons(found)):
            return found
        with self.alone(waiting):
            return stage()


@dataclass(frozen=True)
class ChildRole:
    """What a pool's children are: `name` ("candidate": they import candidates; "clean", "baseline",
    "reference": they never do), and the GPU's ledger they reserve their need in (None: no admission)."""

    name: str = "candidate"
    ledger: GpuMemory | None = None

    @property
    def clean(self) -> bool:
        return self.name != "candidate"


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def device_memory() -> GpuMemory | None:
    """The ledger for the GPU the children use, its size and use read from NVML; None where NVML
    cannot be read (the evaluator then admits by the pools' sizes alone, as before)."""
    try:
        lib, handle = nvml_device()
    except OSError:
        return None

    def read() -> tuple[int, int] | None:
        info = _NvmlMemory()
        if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(info)) != 0:
            return None
        return int(info.total), int(info.used)
    first = read()
    if first is None:
        return None
    return GpuMemory(first[0], lambda: (read() or (0, None))[1])
