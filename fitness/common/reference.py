"""float64 references computed in the engine process, cached by case.

Seeds are fresh for every evaluation (fitness.engine.evaluator), so a reference is rarely asked for
twice; the cache keeps the ones computed lately, bounded in bytes, and makes threads that ask
for the same case at once wait for one computation. One case is computed at a time (each
already uses all of torch's CPU threads; seen on the H100 machine: 15 tasks computing theirs at
once made each comparison take 20 s; on the GPU, see PARALLEL). On a GPU machine the inputs are
drawn and the references computed and kept on the GPU, where the outputs are compared (a
float64 matmul there takes milliseconds, on the CPU seconds; drawing 64M elements on the CPU
~0.5 s); a reference that cannot run on the GPU runs on the CPU from the same inputs.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from fitness.common.compare import as_list, compare_outputs, compare_where_room, dtype_name, on_device_if_room
from fitness.common.inputs import draw_inputs
from fitness.common.messages import RefCheck, RefPrefetch, TaskSpec
from suites.lru import BytesLRU
from suites.task import Task, describe_variant

# on a GPU: a tenth of its memory, at most 8 GiB. The references of the cases in flight (about 40
# on builtin with 8 workers, up to 64 MiB each in float64) must fit: with 2 GiB, H100 builtin
# computed 1328 references where 1008 were asked for (the rest dropped before their comparison)
DEVICE_BYTES = 8 << 30
DEVICE_SHARE = 0.1
# references computed at once. One: on the CPU each uses all of torch's threads; on the H100 (builtin
# steady state, `bench/evaluator_bench.py --ref-parallel`) four at once made each take 62 ms instead
# of 19 (the engine's GIL and the device's one stream), 98.5 candidates/min against 110.6
PARALLEL = 1
# (task, shape, dtype)s whose outputs' dtypes and shapes are kept: they do not depend on the seed,
# and finding them on meta tensors cost 1-6 ms of the engine's Python per reference (CPU, builtin)
SIGNATURES_KEPT = 4096
# a reference child's GPU memory beside its cache: a comparison's float64 copies and differences of
# outputs up to 64 MiB, a reference computed beside it, and the blocks torch's allocator keeps
# (H100 builtin, 4 children: with 2 GiB the allocator freed and asked again so often that a
# reference took 12-14 ms instead of 0.1-0.8; with 4 GiB 3.8 ms)
REFERENCE_WORK_BYTES = 4 << 30
TRIM_POLL_S = 0.05  # how often an idle reference child looks at what its allocator keeps
# a case's float64 outputs, and the [(dtype, shape, strides)] the candidate's outputs must have
Reference = tuple[list[torch.Tensor], list[tuple]]


def default_bytes() -> int:
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 16 << 30
    return min(32 << 30, physical // 4)


def device_bytes(device: str) -> int:
    try:
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    except (RuntimeError, AssertionError, ValueError):  # not a CUDA device (tests: "meta")
        return DEVICE_BYTES
    return min(DEVICE_BYTES, int(DEVICE_SHARE * total))


class Signatures:
    """The outputs' [(dtype, shape)] by (task, shape, dtype), where meta tensors gave them: they
    do not depend on the seed. (Not where the reference had to run for real: an output whose
    shape depends on the data has no meta kernel.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items = BytesLRU(SIGNATURES_KEPT, lambda value: 1)

    def get(self, key: tuple) -> list[tuple] | None:
        with self._lock:
            return self._items.get(key) if key in self._items else None

    def put(self, key: tuple, signature: list[tuple]) -> None:
        with self._lock:
            self._items.put(key, signature)


class ReferenceCache:
    def __init__(self, max_bytes: int | None = None, device: str = "cpu", parallel: int | None = None):
        if max_bytes is None:
            max_bytes = default_bytes() if device == "cpu" else device_bytes(device)
        self.max_bytes = max_bytes
        self.device = device
        self._items = BytesLRU(max_bytes, lambda value: sum(r.numel() * r.element_size() for r in value[0]))
        self._lock = threading.Lock()
        self._pending: dict[tuple, threading.Lock] = {}  # key -> lock held while that case is computed
        self.parallel = parallel or PARALLEL
        self._compute = threading.BoundedSemaphore(self.parallel)
        self._signatures = Signatures()
        self._ahead = ThreadPoolExecutor(1, thread_name_prefix="references-ahead")
        # what the references cost the engine: computed, seconds computing, seconds waiting for a turn
        self.computed, self.compute_s, self.wait_s = 0, 0.0, 0.0

    def get(self, task: Task, case: dict) -> Reference:
        """(float64 outputs, [(dtype, shape)] the candidate's outputs must have)."""
        key = task.case_key(case)
        with self._lock:
            if key in self._items:
                return self._items.get(key)
            pending = self._pending.setdefault(key, threading.Lock())
        with pending:
            with self._lock:
                if key in self._items:  # computed while this thread waited
                    return self._items.get(key)
            t0 = time.monotonic()
            with self._compute:
                t1 = time.monotonic()
                value = compute(task, case, self.device, self._signatures)
            with self._lock:
                self._items.put(key, value)
                self._pending.pop(key, None)
                self.computed += 1
                self.wait_s += t1 - t0
                self.compute_s += time.monotonic() - t1
        return value

    def prefetch(self, task: Task, case: dict) -> None:
        """Starts computing the case's reference in the background, so that the comparison that
        asks for it later finds it ready (or waits for it, not for another). For a case whose
        outputs are on their way: two or three ahead at most, since the cache is bounded."""
        self._ahead.submit(self._quiet_get, task, case)

    def _quiet_get(self, task: Task, case: dict) -> None:
        try:
            self.get(task, case)
        except Exception:  # noqa: BLE001 - the comparison that asks for it will meet the error itself
            pass


def compute(task: Task, case: dict, device: str = "cpu", signatures: Signatures | None = None) -> Reference:
    """Drawn from the case's seed by the workers' own function, on the device they draw on;
    on a GPU the reference stays there, where the outputs are compared. `signatures`: the
    outputs' dtypes and shapes known so far, by shape and dtype."""
    args = draw_inputs(task, case, case["seed"], device if device.startswith("cuda") else "cpu")
    key = task.case_key(case)[:-1]  # without the seed
    expected = signatures.get(key) if signatures is not None else None
    if expected is None:
        expected = on_meta(task, args)
        if expected is None:  # some ops have no meta kernel: run it for real, and keep nothing
            expected = [form(o) for o in as_list(task.reference(*args))]
        elif signatures is not None:
            signatures.put(key, expected)
    if device != "cpu":
        try:
            return _float64_reference(task, args, device), expected
        except Exception:  # noqa: BLE001 - e.g. a reference that makes CPU tensors of its own
            pass
    return [r.cpu() for r in _float64_reference(task, args, "cpu")], expected  # the same values, on the CPU


def _float64_reference(task: Task, args: tuple, device: str) -> list[torch.Tensor]:
    up = [a.to(device, torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point()
          else a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        return [r.detach() for r in as_list(task.reference(*up))]


def form(o: torch.Tensor) -> tuple[str, tuple, tuple]:
    """(dtype name, shape, strides): what a candidate's output must match besides its values."""
    return dtype_name(o), tuple(o.shape), tuple(o.stride())


def on_meta(task: Task, args: tuple) -> list[tuple[str, tuple, tuple]] | None:
    """dtype, shape and strides of each output for inputs in the task's dtype and layout, found
    on meta tensors; None where the reference cannot run on them. (Not the float64 run: an
    up-cast copy of a strided input is contiguous, and torch lays outputs out as their inputs.)"""
    try:
        meta = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
                if isinstance(a, torch.Tensor) else a for a in args]
        return [form(o) for o in as_list(task.reference(*meta))]
    except Exception:  # noqa: BLE001 - an op without a meta kernel
        return None


def with_variant(problem: str, case: dict) -> str:
    """A mismatch's description with the input variant it was met on, if any."""
    variant = describe_variant(case)
    return f"{problem}, on {variant}" if problem and variant else problem


# An input variant (scaled, offset) grows an honest kernel's rounding with its inputs' magnitude,
# not its outputs': H100, the starting kernels of layernorm (offset), cumsum, row_sum and matmul
# (scaled) failed the task's own tolerance by 1-3 ulps on 1 to 2,861 elements. What a variant is
# there to catch errs by far more: a one-pass variance on N(64, 1) rows of 1024 is off by 3e-3
# against 1e-5 for two passes (float32), and a softmax without its max overflows to NaN.
VARIANT_SLACK = 4.0


def compare_case(task: Task, outs: Any, refs: Any, expected: list | None, case: dict | None = None) -> str:
    """compare_outputs with what the task declares: its tolerance and its rounding rule. On an
    input variant whose reference is not finite nothing can be verified: that fails, saying so
    (a task that declares such a variant is wrong, and every candidate of it fails alike)."""
    variant = describe_variant(case or {})
    if variant and any(r.is_floating_point() and not bool(torch.isfinite(r).all()) for r in as_list(refs)):
        return (f"the float64 reference is not finite on {variant}: nothing could be verified there "
                f"(the task declares that variant wrongly)")
    if variant:  # atol relative to the output's magnitude, and a slack: see VARIANT_SLACK
        return compare_outputs(outs, refs, task.tolerance, expected=expected, rounding_ties=task.rounding_ties,
                               slack=VARIANT_SLACK, scaled=True)
    return compare_outputs(outs, refs, task.tolerance, expected=expected, rounding_ties=task.rounding_ties)


class ReferenceSide:
    """A reference child's side: its cache of references and the two requests it answers."""

    def __init__(self, device: str, load_task: Callable[[TaskSpec], Task], start_device: Callable[[], None]):
        self.device, self.load_task, self.start_device = device, load_task, start_device
        self.cache: ReferenceCache | None = None
        self._last = time.monotonic()  # when the child last started or answered a request
        self._active = 0  # requests being answered now

    def ops(self) -> dict[str, Callable[[Any], dict]]:
        """The requests it answers, by op, each given its typed request (fitness.common.messages)."""
        return {RefPrefetch.op: self._answer(self.prefetch), RefCheck.op: self._answer(self.check)}

    def _answer(self, op: Callable[[Any], dict]) -> Callable[[Any], dict]:
        def answer(req: RefPrefetch | RefCheck) -> dict:
            self._active, self._last = self._active + 1, time.monotonic()
            try:
                return op(req)
            finally:
                self._active, self._last = self._active - 1, time.monotonic()
        return answer

    def _cache(self, req: RefPrefetch | RefCheck) -> ReferenceCache:
        if self.cache is None:
            self.start_device()
            self.cache = ReferenceCache(req.cache_bytes, self.device)
            if self.device.startswith("cuda"):
                # a hard bound of its cache and twice the working memory; the memory torch's
                # allocator keeps beyond one working memory is given back while the child is idle
                # (six children unbounded held 6-7 GiB each and the candidates' children ran out; a
                # bound the allocator met mid-comparison made it free and ask again: see
                # REFERENCE_WORK_BYTES)
                total = torch.cuda.get_device_properties(torch.device(self.device)).total_memory
                torch.cuda.set_per_process_memory_fraction(
                    min(0.8, (self.cache.max_bytes + 2 * REFERENCE_WORK_BYTES) / total))
                threading.Thread(target=self._trim, args=(self.cache.max_bytes + REFERENCE_WORK_BYTES,),
                                 daemon=True, name="reference-trim").start()
        return self.cache

    def _trim(self, keep_bytes: int) -> None:
        """Gives the allocator's unused blocks back once the child has been idle a moment and holds
        more than `keep_bytes` (off the comparisons' path)."""
        while True:
            time.sleep(TRIM_POLL_S)
            idle = self._active == 0 and time.monotonic() - self._last > TRIM_POLL_S
            if idle and torch.cuda.memory_reserved() > keep_bytes:
                torch.cuda.empty_cache()

    def prefetch(self, req: RefPrefetch) -> dict:
        self._cache(req).prefetch(self.load_task(req.task), req.case)
        return {}

    def check(self, req: RefCheck) -> dict:
        """'' or what is wrong with the outputs; "ms": where the child's time went."""
        t0 = time.perf_counter()
        task = self.load_task(req.task)
        refs, expected = self._cache(req).get(task, req.case)
        t1 = time.perf_counter()
        outputs = on_device_if_room(req.outputs, self.device)
        t2 = time.perf_counter()
        problem = compare_where_room(self.device, lambda o, r: compare_case(task, o, r, expected, req.case),
                                     outputs, refs, cache_limit=None)
        ms = {"reference": t1 - t0, "upload": t2 - t1, "compare": time.perf_counter() - t2}
        return {"problem": problem, "ms": {k: round(1e3 * x, 3) for k, x in ms.items()}}
