"""One side of a GPU timing, in its own clean process: the baseline, or the candidate's recorded
trace replayed (fitness.trace). The engine alternates trials between the two processes.

Method (DESIGN.md §5): each timed region runs the function over R distinct input sets, R chosen
so the sets together exceed twice the L2 (graphs do not flush it); the region is a CUDA graph
replay when both sides can be captured (a Python launch costs ~60 us on the H100, more than
many kernels), else an eager loop closed by a device-wide synchronize. L2 is flushed before
every region. Before each trial every set gets the contents of one of two draws, alternating, so
a kernel that keeps answers in its own scratch memory between replays misses; after the trials
the sets get a third draw and the outputs of sets the engine picks are checked against the
engine's reference.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from fitness.harness import nbytes, to_device
from suites.script import ZeroedEmpty, tensors_of

MAX_SETS = 64
SET_BUDGET_BYTES = 2 << 30
MIN_REGION_MS = 0.2  # input sets: enough for a region this long (memory allows no more)
REGION_MS = 1.0  # a region's length when one pass over the sets evicts L2 and can be repeated
# Sets to span twice the L2 only while that keeps a region this short: a slow kernel's warm L2 can
# save it at most in_bytes / bandwidth (10 MiB at 3 TB/s: 3.5 us of a 2 ms call, 0.2%), and H100
# TritonBench cross_entropy2 (4-5.6 ms per call, eager) took 64 sets, 21 trials a side and 6
# shapes: ~30 s of the GPU's turn per candidate, 55% of a 14-task search's.
REGION_CAP_MS = 10.0
CHECK_SEED = 1234  # the RNG seed both sides' checked calls start from
# The GPU held busy (a spin of this many clock cycles, ~0.1 ms) before a region's start event, so
# the region is queued whole before it begins: a start event the GPU reaches while this process
# is still launching the region counts the launching too, which is the process's own time (its
# Python, its CPU), not the kernel's. H100, bench/placement_probe.py, one process, 5 layouts of
# TritonBench triton_argmax's 8 KiB shape: medians in two modes, 3.03-3.76 us, without it, and
# 3.71-3.78 us with it (the A/A alone runs of the README were taken with it).
LEAD_CYCLES = 200_000


def _fill(sets, contents):
    """`contents` into every set, which got its layout from the same draws (fitness.harness.to_device
    keeps strides and storage). An expanded input (a stride 0: TritonBench multinomial_sampling's
    indices) cannot take its elements one by one, as torch refuses to write one memory location
    twice: it takes its memory whole. Which inputs those are is read once per fill, not per set."""
    whole = [isinstance(src, torch.Tensor) and any(st == 0 and n > 1 for st, n in zip(src.stride(), src.shape))
             for src in contents]
    for s in sets:
        for dst, src, by_memory in zip(s, contents, whole):
            if not isinstance(dst, torch.Tensor):
                continue
            dst = dst.detach()  # a call may have made an input an autograd view
            if by_memory and dst.untyped_storage().nbytes() == src.untyped_storage().nbytes():
                dst.untyped_storage().copy_(src.untyped_storage())
            else:
                dst.copy_(src)


def _as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def n_sets_for(in_bytes: int, t_one_ms: float, l2_bytes: int) -> int:
    """Input sets per timed region: together over twice the L2 and a region of MIN_REGION_MS at
    least, but no region over REGION_CAP_MS for the L2's sake."""
    t = max(t_one_ms, 1e-4)
    n = max(min(math.ceil(2 * l2_bytes / max(in_bytes, 1)), math.floor(REGION_CAP_MS / t)),
            math.ceil(MIN_REGION_MS / t))
    return int(max(1, min(n, MAX_SETS, SET_BUDGET_BYTES // max(in_bytes, 1))))


def passes_for(n_sets: int, in_bytes: int, t_one_ms: float, l2_bytes: int) -> int:
    """Passes over the input sets in one timed region. H100: a 0.2 ms region of a 14 us softmax
    swung 28% between trials (2 of 49 exploit verdicts flagged noisy); repeating the pass to 1 ms
    steadies it. Repeated only when one pass reads more than twice the L2, so every pass starts
    cold as the first one does."""
    if n_sets * in_bytes < 2 * l2_bytes:
        return 1
    return int(max(1, min(math.ceil(REGION_MS / max(n_sets * t_one_ms, 1e-4)), 16)))


def _unprepared() -> None:
    raise RuntimeError("the side's timed region was not prepared")


_FLUSH: list[torch.Tensor] = []  # one L2-flushing buffer per process, shared by its sides


def _flush_buffer(l2_bytes: int) -> torch.Tensor:
    if not _FLUSH:
        _FLUSH.append(torch.empty(max(256 << 20, 4 * l2_bytes) // 4, dtype=torch.int32, device="cuda"))
    return _FLUSH[0]


class TimedSide:
    def __init__(self, fn, draws: list[tuple]):
        self.fn = fn
        self.draws = draws  # [A, B, check], each a tuple of device inputs
        props = torch.cuda.get_device_properties(0)
        self.l2_bytes = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
        self.flush_buf = _flush_buffer(self.l2_bytes)
        self.sets: list[tuple] = []
        self.graph = None
        self.graph_outs: list = []  # the graph's outputs, per set (an eager region keeps none)
        self.uncapturable = False
        self.method = ""
        self.run: Callable[[], object] = _unprepared  # the timed region, once prepare() made it
        self.cal: dict = {}  # what calibrate() found, kept with a side the baseline reuses
        self.region_ms: float | None = None  # the last timed region's length

    def nbytes(self) -> int:
        return sum(nbytes(d) for d in self.draws) + sum(nbytes(s) for s in self.sets)

    def calibrate(self) -> dict:
        """Warm-up (compile, autotune, lazy loads) and the time of one call."""
        t0 = time.perf_counter()
        self.fn(*self._copy(0))
        torch.cuda.synchronize()
        args = self._copy(0)
        times = []
        for _ in range(3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            self.fn(*args)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return {"t_one_ms": statistics.median(times), "in_bytes": nbytes(self.draws[0]), "l2_bytes": self.l2_bytes,
                "warm_ms": round((time.perf_counter() - t0) * 1e3, 2)}

    def _copy(self, k: int) -> tuple:
        return tuple(to_device(a, "cuda") for a in self.draws[k])

    def prepare(self, n_sets: int, graph: bool) -> str:
        """The timed region over `n_sets` input sets: a CUDA graph (captured once per number of
        sets, kept when the side is asked for eager and back) or an eager loop."""
        if len(self.sets) != n_sets:
            self.sets, self.graph, self.graph_outs = [self._copy(0) for _ in range(n_sets)], None, []
        if graph and self.graph is None and not self.uncapturable:
            self._capture()
        if graph and self.graph is not None:
            self.run, self.method = self.graph.replay, "cuda-graph"
            return self.method
        keep: list = []

        def run():
            for s in self.sets:
                keep[:] = [self.fn(*s)]
            torch.cuda.synchronize()  # device-wide: work on any stream belongs to the region
        self.run, self.method = run, "eager"
        return self.method

    def _capture(self):
        rng = torch.cuda.default_generators[torch.cuda.current_device()]
        saved = rng.clone_state()
        try:
            for s in self.sets:  # compile and autotune outside the capture
                self.fn(*s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs = [_as_list(self.fn(*s)) for s in self.sets]
            self.graph, self.graph_outs = g, outs
        except Exception:  # noqa: BLE001 - not capturable: the engine times both sides eagerly
            # a capture that fails before its end leaves the CUDA generator marked as capturing, and
            # every later random draw in the process raised "Offset increment outside graph capture
            # encountered unexpectedly" (H100, TritonBench softmax_triton3 lost at its starting kernel)
            rng.graphsafe_set_state(saved)
            torch.cuda.synchronize()
            self.uncapturable = True
            self.sets = [self._copy(0) for _ in range(len(self.sets))]  # a failed capture may leave them half-written

    def trial(self, k: int, passes: int = 1) -> float:
        """ms per input set of one timed region (`passes` passes over the sets), on the k-th
        alternation of the two draws."""
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _fill(self.sets, self.draws[k % 2])
        self.flush_buf.zero_()
        if LEAD_CYCLES:
            torch.cuda._sleep(LEAD_CYCLES)
        s.record()
        for _ in range(passes):
            self.run()
        e.record()
        torch.cuda.synchronize()
        self.region_ms = s.elapsed_time(e)
        return self.region_ms / (len(self.sets) * passes)

    def check(self, picks: list[int]) -> list[list]:
        """Outputs of the picked sets after a replay of the region on the third draw. Both sides
        start it alike, as the correctness stage does: the same RNG seed (a wrapper that draws
        random numbers itself gave a different output on each side) and zeros where a buffer is
        left uninitialized (outputs the graph keeps; `empty` in an eager call)."""
        if self.method == "cuda-graph":
            for out in self.graph_outs:
                for o in tensors_of(out):
                    o.detach().zero_()  # detached: an output made by an autograd Function may be a view
            _fill(self.sets, self.draws[2])  # after the zeroing: an output may be an input
            torch.manual_seed(CHECK_SEED)
            self.run()
            torch.cuda.synchronize()
            return [_on_host(self.graph_outs[i]) for i in picks]
        _fill(self.sets, self.draws[2])
        outs = []
        for i in picks:
            torch.manual_seed(CHECK_SEED + i)
            with ZeroedEmpty():
                out = self.fn(*self.sets[i])
            torch.cuda.synchronize()
            outs.append(_on_host(out))
        return outs


def _on_host(out: object) -> list[torch.Tensor]:
    """A call's output tensors, flattened, on the host. Flattened as a recorded trace's outputs are
    (fitness.trace.Recorder): a wrapper returning a tuple with non-tensors or nested tuples (TritonBench
    apply_penalty: 8 items) gave the baseline a longer list than its own replayed kernels."""
    return [o.detach().cpu() for o in tensors_of(out)]
