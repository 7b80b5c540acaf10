"""Whether any process but the measuring turn's two children worked on the GPU while a shape was
measured (issue 39, class 6: a reported time is bounded only from above unless the GPU was idle
but for the sides being timed; a neighbour's kernels, time-sliced in, slow whichever side they
meet, and a slowed baseline inflates every speedup measured against it).

Read from NVML's per-process utilization samples (the driver's own accounting: which processes
ran kernels, and how much of each sample period), through the driver's libnvidia-ml by ctypes
(pynvml need not be installed). Where NVML cannot be loaded or does not give per-process samples
(no driver, MIG, an unsupported GPU), `foreign` answers None and `reason` says why: the caller
decides what an unverified turn may still claim (fitness.engine.measuring).
"""
from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import NamedTuple

from fitness.process.reaper import stat_of

BUSY_SM_PCT = 5  # a sample where another process kept the SMs busy this share of the period or more
NVML_SUCCESS, NVML_ERROR_NOT_FOUND, NVML_ERROR_INSUFFICIENT_SIZE = 0, 6, 7


class Sample(NamedTuple):
    """One of NVML's per-process utilization samples."""

    pid: int
    sm_pct: int
    at_us: int  # the driver's timestamp (microseconds, the host's clock)


Sampler = Callable[[int], list[Sample]]  # samples since a timestamp; raises OSError where it cannot


class _Nvml(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def nvml_sampler() -> Sampler:
    """The driver's per-process samples of the GPU the children use (CUDA_VISIBLE_DEVICES' first
    entry: an index or a UUID); OSError where NVML is missing."""
    lib, handle = nvml_device()

    def samples(since_us: int) -> list[Sample]:
        count = ctypes.c_uint(0)
        rc = lib.nvmlDeviceGetProcessUtilization(handle, None, ctypes.byref(count), ctypes.c_ulonglong(since_us))
        if rc == NVML_ERROR_NOT_FOUND:
            return []  # no process ran kernels since then
        if rc not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE):
            _ok(rc, "nvmlDeviceGetProcessUtilization")
        buf = (_Nvml * max(1, count.value))()
        rc = lib.nvmlDeviceGetProcessUtilization(handle, buf, ctypes.byref(count), ctypes.c_ulonglong(since_us))
        if rc == NVML_ERROR_NOT_FOUND:
            return []
        _ok(rc, "nvmlDeviceGetProcessUtilization")
        return [Sample(int(x.pid), int(x.smUtil), int(x.timeStamp)) for x in buf[:count.value]]
    samples(int(time.time() * 1e6))  # fails now, where per-process samples are not supported, not mid-turn
    return samples


def nvml_device() -> tuple[ctypes.CDLL, ctypes.c_void_p]:
    """NVML and its handle of the GPU the children use (CUDA_VISIBLE_DEVICES' first entry: an
    index or a UUID); OSError where NVML is missing."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        raise OSError(f"NVML cannot be loaded: {e}") from None
    _ok(lib.nvmlInit_v2(), "nvmlInit")
    handle = ctypes.c_void_p()
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    if first.startswith("GPU-") or first.startswith("MIG-"):
        _ok(lib.nvmlDeviceGetHandleByUUID(first.encode(), ctypes.byref(handle)), "nvmlDeviceGetHandleByUUID")
    else:
        _ok(lib.nvmlDeviceGetHandleByIndex_v2(int(first or 0), ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex")
    return lib, handle


def _ok(rc: int, what: str) -> None:
    if rc != NVML_SUCCESS:
        raise OSError(f"{what} returned NVML error {rc}")


def _parent(pid: int) -> int | None:
    """The parent of `pid` as /proc gives it; None when it is gone or unreadable."""
    st = stat_of(pid)
    return st[1] if st else None


def _visible(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


class BusyProbe:
    """Samples other processes' GPU work over a window. `sampler`: a stand-in in tests; by default
    NVML, loaded on first use (the engine's process never starts CUDA for it). `parent` and
    `visible` read the process tree (/proc; stand-ins in tests)."""

    def __init__(self, sampler: Sampler | None = None, parent: Callable[[int], int | None] = _parent,
                 visible: Callable[[int], bool] = _visible, engine: int | None = None):
        self._sampler = sampler
        self._loaded = sampler is not None
        self.parent, self.visible = parent, visible
        self.engine = os.getpid() if engine is None else engine  # the run: this process and what it started
        self.reason = ""  # why the GPU's processes could not be read, once that is known
        # the run's own other processes (correctness children, the next candidates' replay children)
        # seen at work in the last window: the engine's accounting knows them; they are noted, not refused
        self.shared: list[Sample] = []
        self.window = ""  # why the last window alone could not be read (the next may be)

    def _get(self) -> Sampler | None:
        if not self._loaded:
            self._loaded = True
            try:
                self._sampler = nvml_sampler()
            except (OSError, AttributeError, ValueError) as e:
                self.reason = f"the GPU's other processes could not be read (NVML: {e})"
        return self._sampler

    def available(self) -> bool:
        """Whether the samples can be read (as far as is known: a failed read is remembered)."""
        return self._get() is not None and not self.reason

    def start(self) -> int:
        """The window's start, in the driver's clock."""
        return int(time.time() * 1e6)

    def foreign(self, since_us: int, allowed: set[int]) -> list[Sample] | None:
        """Samples since `since_us` of processes that kept the SMs busy (at least BUSY_SM_PCT)
        and are neither in `allowed` nor started by one of them; None where they cannot be read
        (`reason` says why: NVML missing, or its process ids are not this machine's, as in a
        container without the host's pid namespace: then the turn's own children, which did
        run kernels, are nowhere among them)."""
        sampler = self._get()
        if sampler is None:
            return None
        try:
            samples = [s for s in sampler(since_us) if s.at_us >= since_us]
        except OSError as e:
            self.reason = f"the GPU's other processes could not be read (NVML: {e})"
            return None
        busy = [s for s in samples if s.sm_pct >= BUSY_SM_PCT and not self._ours(s.pid, allowed)]
        if busy and not any(self._ours(s.pid, allowed) for s in samples) and \
                not any(self.visible(s.pid) for s in busy):
            self.reason = (f"the GPU's other processes could not be told from the turn's own (NVML names "
                           f"{busy_note(busy)}, none of them a process here)")
            return None
        self.window = ""
        if allowed and not any(self._ours(s.pid, allowed) for s in samples):
            # the turn's own children ran kernels in this window: samples that do not show them
            # cannot show a neighbour either (H100 VM: NVML gave no sample of a process spinning
            # the GPU), so nothing is established for this window
            self.window = "NVML's per-process samples did not show the timed processes themselves"
            return None
        self.shared = [s for s in busy if self._ours(s.pid, {self.engine})]
        return [s for s in busy if s not in self.shared]

    def _ours(self, pid: int, allowed: set[int]) -> bool:
        """`pid` is one of `allowed` or was started by one (a walk up its parents). A process that
        outlived its parent was handed to init (or a container's): it is no one's here."""
        for _ in range(64):
            if pid in allowed:
                return True
            parent = self.parent(pid)
            if parent is None or parent <= 1 or parent == pid:
                return False
            pid = parent
        return False


def busy_note(seen: list[Sample]) -> str:
    """Which processes, how busy: 'pid 123 (SMs 80%), pid 456 (SMs 12%)'."""
    most: dict[int, int] = {}
    for s in seen:
        most[s.pid] = max(most.get(s.pid, 0), s.sm_pct)
    return ", ".join(f"pid {pid} (SMs {pct}%)" for pid, pct in sorted(most.items()))
