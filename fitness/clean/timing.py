"""One side of a GPU timing, in its own clean process: the baseline, or the candidate's recorded
trace replayed (fitness.clean.replayer). The engine alternates trials between the two processes.

Method (DESIGN.md §5): each timed region runs the function over R distinct input sets, R chosen
so the sets together exceed twice the L2 (graphs do not flush it); the region is a CUDA graph
replay when both sides can be captured (a Python launch costs ~60 us on the H100, more than
many kernels), else an eager loop closed by a device-wide synchronize. L2 is flushed before
every region.

Nothing a kernel can remember is worth remembering (issue 39, class 3):
- the side holds a pool of distinct draws (R + 1 of them where the engine's seeds allow: a set
  of its own per input set, and one over), and before each trial set i gets draw
  (i + rot) % pool, `rot` picked by the engine for every trial and never the same twice in a
  row: no two sets of a region hold one draw, and no set holds the draw it held the trial before;
- every pass is timed as its own region and the outputs get fresh random bytes before it (a
  graph's kept outputs; an eager call's outputs are scrambled before they are given back to
  the allocator, whose next call takes that memory), so no answer is left where a call writes;
- the outputs of a few sets are copied after one trial the engine picks at random, a trial
  prepared exactly like every other: the checked replays are a sample nothing announces;
- calibration's calls run on distinct draws;
- where a region holds few sets (FRESH_MAX_SETS: large inputs, long calls, where a remembered
  answer saves the most and a table of a few of them is cheap) and the task draws on the GPU,
  every trial but the checked one gets draws never used before, from seeds the engine derives
  per epoch and trial (the same on both sides): a table of answers, however large, never hits.
"""
from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fitness.clean.timing_plan import MAX_SETS as MAX_SETS  # re-exported: the plan's arithmetic
from fitness.clean.timing_plan import MIN_REGION_MS as MIN_REGION_MS
from fitness.clean.timing_plan import REGION_CAP_MS as REGION_CAP_MS
from fitness.clean.timing_plan import REGION_MS as REGION_MS
from fitness.clean.timing_plan import SET_BUDGET_BYTES as SET_BUDGET_BYTES
from fitness.clean.timing_plan import assignment as assignment
from fitness.clean.timing_plan import draws_for as draws_for
from fitness.clean.timing_plan import fresh_seed_of as fresh_seed_of
from fitness.clean.timing_plan import n_sets_for as n_sets_for
from fitness.clean.timing_plan import passes_for as passes_for
from suites.script import _EMPTY_OPS, tensors_of
from suites.task import nbytes, to_device

CHECK_SEED = 1234  # the RNG seed every pass of both sides starts from (a wrapper that draws random numbers)
FRESH_MAX_SETS = 8  # regions of this many sets or fewer get fresh draws every trial (the engine's choice)
CAL_DRAWS = 4  # draws made as a side is prepared: calibration's warm-up call and three timed ones, each its own
# The GPU held busy (a spin of this many clock cycles, ~0.1 ms) before a region's start event, so
# the region is queued whole before it begins: a start event the GPU reaches while this process
# is still launching the region counts the launching too, which is the process's own time (its
# Python, its CPU), not the kernel's. H100, bench/placement_probe.py, one process, 5 layouts of
# TritonBench triton_argmax's 8 KiB shape: medians in two modes, 3.03-3.76 us, without it, and
# 3.71-3.78 us with it (the A/A alone runs of the README were taken with it).
LEAD_CYCLES = 200_000


def _whole(contents: tuple) -> list[bool]:
    """Which inputs are expanded (a stride 0: TritonBench multinomial_sampling's indices): torch
    refuses to write one memory location twice, so those take their memory whole."""
    return [isinstance(src, torch.Tensor) and any(st == 0 and n > 1 for st, n in zip(src.stride(), src.shape))
            for src in contents]


def _fill(sets, contents):
    """`contents` into every set, which got its layout from the same draws (fitness.candidate.harness.to_device
    keeps strides and storage)."""
    _fill_each(sets, [contents] * len(sets))


def _fill_each(sets, contents: list[tuple]) -> None:
    """contents[i] into set i. Which inputs are expanded is read once per fill, not per set."""
    if not sets:
        return
    whole = _whole(contents[0])
    for s, src_set in zip(sets, contents):
        for dst, src, by_memory in zip(s, src_set, whole):
            if not isinstance(dst, torch.Tensor):
                continue
            dst = dst.detach()  # a call may have made an input an autograd view
            if by_memory and dst.untyped_storage().nbytes() == src.untyped_storage().nbytes():
                dst.untyped_storage().copy_(src.untyped_storage())
            else:
                dst.copy_(src)


def _byte_view(s: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=s.device).set_(s)


def scramble_targets(outs: list, sets: list[tuple]) -> list[torch.Tensor]:
    """Byte views of the storages the outputs live in, once each, leaving out any that holds an
    input (an in-place call's output is its input: scrambling it would change what is computed)."""
    held = {a.untyped_storage().data_ptr() for s in sets for a in tensors_of(s) if isinstance(a, torch.Tensor)}
    seen: set[int] = set()
    views = []
    for o in tensors_of(outs):
        s = o.detach().untyped_storage()
        ptr = s.data_ptr()
        if s.nbytes() and ptr not in held and ptr not in seen:
            seen.add(ptr)
            views.append(_byte_view(s))
    return views


def scramble(views: list[torch.Tensor]) -> None:
    """Fresh random bytes (the process's generator, seeded from the OS before each pass)."""
    for v in views:
        v.random_(0, 256)


class _FilledEmpty(TorchDispatchMode):
    """`torch.empty` and friends return memory of one byte value: the baseline's checked calls
    run under two values, and what differs between them is memory its call leaves unwritten."""

    def __init__(self, byte: int):
        super().__init__()
        self.byte = byte

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "overloadpacket", None) is not None and func.overloadpacket.__name__ in _EMPTY_OPS:
            if isinstance(out, torch.Tensor) and out.device.type != "meta" and out.untyped_storage().nbytes():
                _byte_view(out.untyped_storage()).fill_(self.byte)
        return out


def _as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _unprepared() -> None:
    raise RuntimeError("the side's timed region was not prepared")


_FLUSH: list[torch.Tensor] = []  # one L2-flushing buffer per process, shared by its sides


def _flush_buffer(l2_bytes: int) -> torch.Tensor:
    if not _FLUSH:
        _FLUSH.append(torch.empty(max(256 << 20, 4 * l2_bytes) // 4, dtype=torch.int32, device="cuda"))
    return _FLUSH[0]


class _Watch:
    """A region's start and end on the device's clock (CUDA events), or the host's where the side
    runs on a CPU (the logic's tests)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        if cuda:
            self.s, self.e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        if self.cuda:
            if LEAD_CYCLES:
                torch.cuda._sleep(LEAD_CYCLES)
            self.s.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            self.e.record()
        else:
            self.t1 = time.perf_counter()

    def ms(self) -> float:
        return self.s.elapsed_time(self.e) if self.cuda else (self.t1 - self.t0) * 1e3


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()  # device-wide: work on any stream belongs to the region


def _fresh_seed() -> None:
    """The process's generators from the OS: the scrambled bytes of a pass are nobody's guess."""
    torch.manual_seed(secrets.randbits(63))


class TimedSide:
    def __init__(self, fn, draws: list[tuple], n_seeds: int | None = None,
                 more: Callable[[int], tuple] | None = None, fresh: Callable[[int], tuple] | None = None,
                 inplace: bool = False, scratch: Callable[[], list[torch.Tensor]] | None = None):
        """`draws`: the side's first draws (device inputs); `more(k)`: the k-th draw of the engine's
        seeds, made when the input sets need it (`n_seeds` of them in all); `fresh(seed)`: a draw
        from any seed, for trials of fresh draws; `inplace`: the call updates its inputs, so every
        pass starts from the trial's draws again (else the checked pass would hold `passes`
        updates where the reference made one); `scratch()`: memory the call keeps between calls
        that is no output (a replay's scratch: fitness.clean.replayer), scrambled with the outputs."""
        self.fn, self.draws, self.more, self.fresh = fn, list(draws), more, fresh
        self.scratch = scratch or list
        self.inplace = inplace
        self.n_seeds = n_seeds or len(draws)
        first = next((a for a in tensors_of(self.draws[0]) if isinstance(a, torch.Tensor)), None)
        self.cuda = first.device.type == "cuda" if first is not None else torch.cuda.is_available()
        props = torch.cuda.get_device_properties(0) if self.cuda else None
        self.l2_bytes = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
        self.flush_buf = _flush_buffer(self.l2_bytes) if self.cuda else None
        self.sets: list[tuple] = []
        self.graph = None
        self.graph_outs: list = []  # the graph's outputs, per set (an eager region keeps them per pass)
        self.eager_outs: list = []  # the last eager pass's outputs, per set, until scrambled
        self.scrambler: Callable[[], None] = lambda: None  # fresh bytes into the graph's outputs
        self.uncapturable = False
        self.method = ""
        self.run: Callable[[], object] = _unprepared  # the timed region, once prepare() made it
        self.cal: dict = {}  # what calibrate() found, kept with a side the baseline reuses
        self.region_ms: float | None = None  # the last timed region's length (all its passes)
        self.held: list = []  # the picked outputs of the checked trial, on the device
        self.rots: list[int] = []  # every trial's rotation, in order (what the tests read)

    def nbytes(self) -> int:
        return sum(nbytes(d) for d in self.draws) + sum(nbytes(s) for s in self.sets)

    def _call_scrambled(self, args: tuple) -> object:
        """An untimed call whose outputs are scrambled before their memory goes back."""
        out = self.fn(*args)
        scramble(scramble_targets(_as_list(out) + self.scratch(), [args]))
        return out

    def calibrate(self) -> dict:
        """Warm-up (compile, autotune, lazy loads) and the time of one call, each call on a draw
        of its own (a kernel that knew the warm-up's input would be timed as fast)."""
        t0 = time.perf_counter()
        self._call_scrambled(self._copy(0))
        _sync(self.cuda)
        times = []
        for k in range(1, CAL_DRAWS):
            args = self._copy(k % len(self.draws))
            w = _Watch(self.cuda)
            w.start()
            out = self.fn(*args)
            w.stop()
            _sync(self.cuda)
            times.append(w.ms())
            scramble(scramble_targets(_as_list(out) + self.scratch(), [args]))
        return {"t_one_ms": statistics.median(times), "in_bytes": nbytes(self.draws[0]), "l2_bytes": self.l2_bytes,
                "warm_ms": round((time.perf_counter() - t0) * 1e3, 2)}

    def _copy(self, k: int) -> tuple:
        device = "cuda" if self.cuda else "cpu"
        return tuple(to_device(a, device) for a in self.draws[k])

    def n_draws(self) -> int:
        return draws_for(len(self.sets), self.n_seeds) if self.sets else len(self.draws)

    def _ensure_draws(self, n: int) -> None:
        need = draws_for(n, self.n_seeds)
        while len(self.draws) < need:
            if self.more is None:
                raise RuntimeError(f"{need} draws needed for {n} input sets, {len(self.draws)} given")
            self.draws.append(self.more(len(self.draws)))

    def prepare(self, n_sets: int, graph: bool) -> str:
        """The timed region over `n_sets` input sets: a CUDA graph (captured once per number of
        sets, kept when the side is asked for eager and back) or an eager loop."""
        if len(self.sets) != n_sets:
            self._ensure_draws(n_sets)
            self.sets, self.graph, self.graph_outs = [self._copy(i % len(self.draws)) for i in range(n_sets)], None, []
        if graph and self.graph is None and not self.uncapturable and self.cuda:
            self._capture()
        if graph and self.graph is not None:
            self.run, self.method = self.graph.replay, "cuda-graph"
            return self.method

        def run():
            self.eager_outs = [self.fn(*s) for s in self.sets]  # all kept: no set's output reuses another's
            _sync(self.cuda)
        self.run, self.method = run, "eager"
        return self.method

    def _capture(self):
        rng = torch.cuda.default_generators[torch.cuda.current_device()]
        saved = rng.clone_state()
        try:
            for s in self.sets:  # compile and autotune outside the capture
                self._call_scrambled(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs = [_as_list(self.fn(*s)) for s in self.sets]
            self.graph, self.graph_outs = g, outs
            self.scrambler = self._scramble_graph(outs)
        except Exception:  # noqa: BLE001 - not capturable: the engine times both sides eagerly
            # a capture that fails before its end leaves the CUDA generator marked as capturing, and
            # every later random draw in the process raised "Offset increment outside graph capture
            # encountered unexpectedly" (H100, TritonBench softmax_triton3 lost at its starting kernel)
            rng.graphsafe_set_state(saved)
            torch.cuda.synchronize()
            self.uncapturable, self.graph, self.graph_outs = True, None, []
            self.sets = [self._copy(i % len(self.draws)) for i in range(len(self.sets))]  # maybe half-written

    def _scramble_graph(self, outs: list) -> Callable[[], None]:
        """The scrambling of the graph's outputs as one graph of its own (one launch a pass, not one
        per output), or, if that cannot be captured, the same work launched eagerly. The graph only
        copies from a noise buffer that one eager launch fills with fresh random bytes before each
        replay: a graph that drew random numbers itself left long-lived baseline children raising
        "Offset increment outside graph capture encountered unexpectedly" at its replay (H100,
        TritonBench batched_vecmat_mult, diag_ssm_triton, fast_rms_layernorm; before and after 48)."""
        views = scramble_targets(list(outs) + self.scratch(), self.sets)
        noise = torch.empty(max([v.numel() for v in views] + [1]), dtype=torch.uint8, device=views[0].device) \
            if views else None
        if noise is None:
            return lambda: None
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for v in views:
                    v.copy_(noise[:v.numel()])

            def replay() -> None:
                noise.random_(0, 256)
                g.replay()
            return replay
        except Exception:  # noqa: BLE001 - the eager launches do the same
            torch.cuda.synchronize()
            return lambda: scramble(views)

    def trial(self, rot: int, passes: int = 1, picks: list[int] | None = None, fresh: int | None = None) -> float:
        """ms per input set of one trial: every set filled with its draw of rotation `rot` (or,
        given `fresh`, a draw of its own from seeds no trial used before), then `passes` passes
        over the sets, each timed alone after fresh bytes went into the outputs. `picks`: the
        sets whose outputs are kept (self.held) after the last pass; nothing else about the
        trial differs, so nothing in it says it is checked."""
        self.rots.append(rot if fresh is None else -1)
        if fresh is not None and self.fresh is not None:
            contents = [self.fresh(fresh_seed_of(fresh, i)) for i in range(len(self.sets))]
        else:
            contents = [self.draws[d] for d in assignment(len(self.sets), self.n_draws(), rot)]
        _fill_each(self.sets, contents)
        total = 0.0
        for p in range(passes):
            if self.inplace and p:  # untimed: the last pass updated the inputs
                _fill_each(self.sets, contents)
            _fresh_seed()
            if self.method == "cuda-graph":
                self.scrambler()
            if self.flush_buf is not None:  # after the scramble: its writes leave no output in the L2
                self.flush_buf.zero_()
            torch.manual_seed(CHECK_SEED)  # both sides' random draws start alike in every pass
            w = _Watch(self.cuda)
            w.start()
            self.run()
            w.stop()
            _sync(self.cuda)
            total += w.ms()
            if picks is not None and p == passes - 1:
                outs = self.graph_outs if self.method == "cuda-graph" else self.eager_outs
                self.held = [[o.detach().clone() for o in tensors_of(outs[i])] for i in picks]
            if self.method != "cuda-graph":  # the pass's outputs scrambled before the allocator reuses them
                _fresh_seed()
                scramble(scramble_targets(self.eager_outs + self.scratch(), self.sets))
                self.eager_outs = []
        self.region_ms = total
        return total / (len(self.sets) * passes)

    def checked(self) -> list[list[torch.Tensor]]:
        """The outputs kept by the checked trial, on the host (flattened as a trace's are)."""
        held, self.held = self.held, []
        return [_on_host(o) for o in held]

    def oracle(self, rot: int, picks: list[int]) -> list[list[list[torch.Tensor]]]:
        """The baseline's outputs of the picked sets in a trial of rotation `rot`, twice: with the
        outputs' memory all 0x00 and all 0xFF before the call. Memory the call leaves unwritten
        differs between the two and is no part of what a candidate must match (fitness.engine.measuring)."""
        _fill_each(self.sets, [self.draws[d] for d in assignment(len(self.sets), self.n_draws(), rot)])
        runs = []
        for byte in (0x00, 0xFF):
            torch.manual_seed(CHECK_SEED)
            if self.method == "cuda-graph":
                for v in scramble_targets(self.graph_outs, self.sets):
                    v.fill_(byte)
                self.run()
                _sync(self.cuda)
                runs.append([_on_host(self.graph_outs[i]) for i in picks])
            else:
                with _FilledEmpty(byte):
                    outs = [self.fn(*s) for s in self.sets]
                _sync(self.cuda)
                runs.append([_on_host(outs[i]) for i in picks])
        return [[runs[0][j], runs[1][j]] for j in range(len(picks))]


def _on_host(out: object) -> list[torch.Tensor]:
    """A call's output tensors, flattened, on the host. Flattened as a recorded trace's outputs are
    (fitness.candidate.recorder.Recorder): a wrapper returning a tuple with non-tensors or nested tuples (TritonBench
    apply_penalty: 8 items) gave the baseline a longer list than its own replayed kernels."""
    return [o.detach().cpu() for o in tensors_of(out)]
