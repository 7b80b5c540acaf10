"""GPU timing inside a worker: candidate and baseline interleaved, each on its own copies of the same inputs.

Method (DESIGN.md §5): median of interleaved trials; each timed region runs the function over R
distinct input sets, R chosen so the sets together exceed twice the L2 (graphs do not flush it);
the region is a CUDA graph replay when both sides can be captured (a Python launch costs
~60 us on the H100, more than many kernels), else an eager loop closed by a device-wide
synchronize so work on any stream is counted. L2 is flushed before every region. Outputs of
the captured regions are re-checked after every set's contents are replaced by a draw the
candidate never saw, so a result captured into the graph cannot pass.

Inputs are drawn once per case and kept on the GPU (SetCache): every candidate of a task is
timed on copies of the same draw, and drawing large random tensors on the host would otherwise
cost more than timing them.
"""
from __future__ import annotations

import math
import os
import statistics
import time

import torch

from fitness.compare import compare_outputs, compare_tree
from fitness.harness import CandidateError, InputCache, draw_inputs, nbytes, poison, to_device

# private references, taken at import (before any candidate is loaded) so patching the public
# names cannot reach the timer
_Event = torch.cuda.Event
_sync = torch.cuda.synchronize
_clock = time.perf_counter
_Graph = torch.cuda.CUDAGraph
_graph_ctx = torch.cuda.graph

MAX_SETS = 64
SET_BUDGET_BYTES = 2 << 30
MIN_REGION_MS = 0.2


class TimingError(Exception):
    pass


class SetCache(InputCache):
    """Per case, two input draws kept on the GPU, least recently used dropped past a byte budget:
    the case's own draw (what is timed) and a spare (what the replayed graphs are re-checked on).
    Candidates only ever see copies, so nothing they do reaches the next candidate's inputs."""

    def __init__(self, max_bytes: int, device: str = "cuda"):
        super().__init__(max_bytes)
        self.device = device

    def draw(self, task, case: dict) -> tuple:
        return tuple(tuple(to_device(a, self.device) for a in draw_inputs(task, case, case["seed"] + k * 1000))
                     for k in (0, 1))

    def size(self, value) -> int:
        return sum(nbytes(s) for s in value)


def _copies(args) -> tuple:
    return tuple(to_device(a, "cuda") for a in args)


class Timer:
    def __init__(self):
        props = torch.cuda.get_device_properties(0)
        self.l2_bytes = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
        self.flush_buf = torch.empty(max(256 << 20, 4 * self.l2_bytes) // 4, dtype=torch.int32, device="cuda")
        self._peaks = None
        total = torch.cuda.get_device_properties(0).total_memory
        self.sets = SetCache(int(os.environ.get("TE_TIMING_SET_BYTES", min(16 << 30, total // 5))))

    def flush(self):
        self.flush_buf.zero_()

    def peaks(self) -> dict:
        """Measured ceilings: device-to-device copy bandwidth and bf16 matmul rate."""
        if self._peaks is None:
            n = 1 << 28  # 1 GiB of float32
            src = torch.randn(n, device="cuda")
            dst = torch.empty_like(src)
            t_copy = self._median_ms(lambda: dst.copy_(src), 10)
            a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
            t_mm = self._median_ms(lambda: a @ a, 10)
            self._peaks = {"bandwidth_Bps": 2 * n * 4 / (t_copy * 1e-3),
                           "flops": 2 * 8192 ** 3 / (t_mm * 1e-3), "l2_bytes": self.l2_bytes,
                           "device": torch.cuda.get_device_name()}
            del src, dst, a
        return self._peaks

    def _median_ms(self, fn, reps) -> float:
        fn()
        times = []
        for _ in range(reps):
            s, e = _Event(enable_timing=True), _Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            _sync()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    # -------------------------------------------------------------------------------------
    def time_case(self, task, fn, base_fn, module_name, hook, check_tamper, case, trials) -> dict:
        tol = task.tolerance
        tree = task.script is not None
        t_start = _clock()
        draw, spare = self.sets.get(task, case)
        # each side gets copies of its own: what the candidate writes into its inputs (in-place
        # kernels do, a cheat could zero them) never reaches the baseline's
        first_c, first_b = _copies(draw), _copies(draw)
        in_bytes = nbytes(first_c)
        t_drawn = _clock()
        # warm-up (compile, autotune) on throw-away copies, the candidate first so nothing of the
        # baseline's is in the allocator yet; then one call each on identical fresh inputs is
        # compared: an in-place kernel (rotary, an accumulating output) must not be compared
        # after two applications against one, nor after its autotuner's trial runs
        warm = _copies(draw)
        fn(*warm)
        _sync()
        warm = _copies(draw)
        base_fn(*warm)
        _sync()
        del warm
        out_c = fn(*first_c)
        _sync()
        out_b = base_fn(*first_b)
        _sync()
        t_warm = _clock()
        check_tamper()
        _compare(out_c, out_b, tol, "warm-up call", tree)
        t_one = max(self._median_ms(lambda: fn(*first_c), 3), self._median_ms(lambda: base_fn(*first_b), 3))
        if not tree:  # a script task's result may be its inputs (in-place kernels): keep them
            poison(out_c, out_b)
        t_calibrated = _clock()

        n_sets = max(math.ceil(2 * self.l2_bytes / max(in_bytes, 1)), math.ceil(MIN_REGION_MS / max(t_one, 1e-4)))
        n_sets = int(max(1, min(n_sets, MAX_SETS, SET_BUDGET_BYTES // max(in_bytes, 1))))
        # the sets are copies of one draw: what keeps them out of L2 is that they are distinct
        # memory; distinct contents would not stop a cache that falls back to computing
        sets_c = [first_c] + [_copies(draw) for _ in range(n_sets - 1)]
        sets_b = [first_b] + [_copies(draw) for _ in range(n_sets - 1)]
        t_prepared = _clock()

        method = "cuda-graph"
        try:
            before = hook.launches(module_name)
            run_c, outs_c = _capture(fn, sets_c)
            if hook.launches(module_name) == before:
                raise CandidateError("CUDA graph capture recorded no launch of the candidate's kernels")
            run_b, outs_b = _capture(base_fn, sets_b)
            # give every set the spare draw's contents, replay, and check: a captured result fails
            _fill(sets_c + sets_b, spare)
            run_c()
            _sync()
            run_b()
            _sync()
            for oc, ob in zip(outs_c, outs_b):
                _compare(oc, ob, tol, "timed (graph) call on re-drawn inputs", tree)
        except CandidateError:
            raise
        except Exception:  # noqa: BLE001 - not capturable: time eagerly, both sides alike
            _sync()
            method = "eager"
            # the capture may have called one side's kernel on its sets and not the other's:
            # fresh contents for all, so an in-place kernel is compared after equal calls
            _fill(sets_c + sets_b, draw)
            outs_c, outs_b = [], []
            run_c, run_b = _eager(fn, sets_c, outs_c), _eager(base_fn, sets_b, outs_b)
        t_captured = _clock()

        times = {"c": [], "b": []}
        events = []
        wall0 = _clock()
        for i in range(trials):
            for side in (("c", "b") if i % 2 == 0 else ("b", "c")):
                run = run_c if side == "c" else run_b
                self.flush()
                s, e = _Event(enable_timing=True), _Event(enable_timing=True)
                s.record()
                run()
                if method == "eager":
                    _sync()  # device-wide: work launched on any stream belongs to the region
                e.record()
                events.append((side, s, e))
            _sync()
        wall_ms = (_clock() - wall0) * 1e3
        check_tamper()
        for side, s, e in events:
            times[side].append(s.elapsed_time(e))
        total = sum(times["c"]) + sum(times["b"])
        if total > wall_ms * 1.02 + 0.5:
            raise CandidateError(f"timings add up to {total:.1f} ms inside {wall_ms:.1f} ms of wall time")
        if method == "eager" and outs_c:
            _compare(outs_c[-1], outs_b[-1], tol, "timed (eager) call", tree)
        med_c = statistics.median(times["c"]) / n_sets
        med_b = statistics.median(times["b"]) / n_sets
        poison(outs_c, outs_b, sets_c, sets_b)
        bytes_, flops = task.cost(case["shape"], case["dtype"])
        return {"shape": case["shape"], "dtype": case["dtype"], "candidate_ms": med_c, "baseline_ms": med_b,
                "candidate_spread": _spread(times["c"]), "baseline_spread": _spread(times["b"]),
                "method": method, "input_sets": n_sets, "trials": trials, "bytes": bytes_, "flops": flops,
                "phase_ms": {"draw": _ms(t_start, t_drawn) + _ms(t_calibrated, t_prepared),
                             "warm_up": _ms(t_drawn, t_warm), "calibrate": _ms(t_warm, t_calibrated),
                             "capture": _ms(t_prepared, t_captured),
                             "trials": _ms(t_captured, _clock())}}


def _fill(sets, contents):
    for s in sets:
        for dst, src in zip(s, contents):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)


def _ms(t0, t1) -> float:
    return round((t1 - t0) * 1e3, 2)


def _eager(fn, sets, keep: list):
    def run():
        for s in sets:
            keep[:] = [fn(*s)]  # hold only the last output, as a graph region would
    return run


def _capture(fn, sets):
    # one eager pass on every set first, so autotuning and compilation happen outside capture
    for s in sets:
        fn(*s)
    _sync()
    g = _Graph()
    with _graph_ctx(g):
        outs = [fn(*s) for s in sets]
    return g.replay, outs


def _spread(times) -> float:
    q = statistics.quantiles(times, n=4)
    return (q[2] - q[0]) / statistics.median(times)


def _compare(out_c, out_b, tol, where, tree=False):
    # a script task's call returns whatever its suite's call returns: a tree, not a tensor list
    problem = (compare_tree(out_c, out_b, tol, slack=4.0, path="output") if tree
               else compare_outputs(out_c, out_b, tol, slack=4.0))
    if problem:
        raise CandidateError(f"{where}: candidate and baseline disagree: {problem}")
