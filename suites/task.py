"""The task model: what a kernel must compute, on which inputs, and how it is judged.

A task is data plus three small callables (reference, input maker, cost model). Callables
cannot cross a process boundary, so a worker rebuilds a task from (suite, name, suite_path)
through `suites.registry.load_task` instead of receiving it.
"""
from __future__ import annotations

import math
import random
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

Shape = dict  # named sizes, e.g. {"M": 1024, "N": 1000}; may carry layout flags like "stride": 3


@dataclass(frozen=True)
class ShapeSet:
    """Tuning shapes are shown to the optimizer and timed; held-out shapes never are."""

    tuning: tuple[Shape, ...]
    heldout: tuple[Shape, ...]


@dataclass(frozen=True)
class Task:
    name: str
    suite: str
    category: str
    entry: str  # name of the function a candidate module must define
    # reference(*inputs) -> Tensor | tuple[Tensor, ...]. Written with plain torch ops so that it
    # runs on float64 copies of the inputs (the correctness oracle) and, in the task dtype on
    # the device, as the timing baseline.
    reference: Callable[..., Any]
    # make_inputs(shape, dtype, generator) -> tuple of CPU tensors / Python scalars, in the
    # order the entry point takes them. Must be deterministic for a given generator state.
    make_inputs: Callable[..., tuple]
    shapes: ShapeSet  # GPU-sized
    dtypes: tuple[str, ...]  # the dtype(s) the task is posed in, e.g. ("float16", "bfloat16")
    # per *output* dtype: (atol, rtol), an element passes when |out-ref| <= atol + rtol*|ref|; or
    # {metric: bound}, the whole tensor is judged (fitness.metric_tolerance; user tasks only)
    tolerance: dict[str, Any]
    # cost(shape, dtype) -> (bytes moved, flops) for one call: the roofline floor
    cost: Callable[[Shape, str], tuple[float, float]]
    start_source: str  # a correct, deliberately unoptimized Triton implementation
    instruction: str = ""
    difficulty: int | None = None
    # smaller shapes for the Triton interpreter on CPU, where GPU sizes would take minutes
    interpreter_shapes: ShapeSet | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    # make_inputs makes every tensor with torch factory functions and the generator it is given,
    # so under `torch.device("cuda")` with a CUDA generator it draws on the GPU: on the H100 a
    # 64M-element randn took the CPU ~0.5 s, each time, in each process, for every fresh seed.
    # Script tasks draw through the suite's own code under the device's default (their timing
    # only: the correctness stage draws on the host in the reference's and the candidate's child
    # alike); H100 TritonBench, 3.1 s of a clean child's 9.9 s per candidate went to host draws
    device_inputs: bool = False
    # data-backed suites: a suites.script.ScriptRunner that the worker calls instead of `entry` on
    # `make_inputs`; the reference is then `start_source` run the same way, not a torch function
    script: Any = None
    # the positions of inputs the entry point updates in place: those inputs, after the call, are
    # the outputs compared (the reference mutates its own copies the same way); what it returns is
    # not looked at (user tasks, INPLACE)
    inplace: tuple[int, ...] = ()
    # torch work outside the Triton kernels is allowed (user tasks, TORCH_OPS = "allowed"): the
    # replay, which runs and times only the ops it recorded, still decides; its total time counts
    torch_ops: bool = False

    def case_key(self, case: dict, seed: int | None = None) -> tuple:
        """Identity of the inputs a case draws: what the input and reference caches key on."""
        seed = case["seed"] if seed is None else seed
        return (self.suite, self.name, repr(sorted(case["shape"].items())), case["dtype"], seed)

    def draw_heldout(self, rng: random.Random, interpreter: bool) -> tuple[Shape, ...]:
        """Held-out shapes for one evaluation, drawn from the task's shape distribution, so no
        list of them exists for a candidate to read (sizes, non-powers of two, layout flags)."""
        return draw_shapes(self.shape_set(interpreter), rng)

    def shape_set(self, interpreter: bool) -> ShapeSet:
        if interpreter and self.interpreter_shapes is not None:
            return self.interpreter_shapes
        return self.shapes


def _step(values: list[int]) -> int:
    """The largest power of two dividing every value (a head dim of 64 or 128 keeps 64)."""
    g = 0
    for v in values:
        g = math.gcd(g, v)
    return g & -g if g else 1


def _sizes(shape: Shape) -> dict:
    return {k: v for k, v in shape.items() if k[:1].isupper() and isinstance(v, int) and not isinstance(v, bool)}


def _draw_size(values: list[int], rng: random.Random) -> int:
    lo, hi, step = min(values), max(values), _step(values)
    if all(v & (v - 1) == 0 for v in values):  # powers of two only (a head dim): stay one
        return 1 << rng.randint(lo.bit_length() - 1, hi.bit_length() - 1)
    x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return _off_power_of_two(max(lo, min(hi, step * max(1, round(x / step)))), step)


def _off_power_of_two(n: int, step: int) -> int:
    """A power of two is the size a kernel is most often hard-coded for: one less, where sizes
    need not be multiples of a power of two."""
    return n - 1 if step == 1 and n > 2 and n & (n - 1) == 0 else n


def draw_shapes(shapes: ShapeSet, rng: random.Random) -> tuple[Shape, ...]:
    """As many shapes as the set's held-out list, each size drawn log-uniformly between the
    smallest and largest value the task's own shapes give it, rounded to a multiple of the
    power of two that all those values share (sizes given only as powers of two stay powers of
    two), and no larger in elements than the largest given shape; layout flags come from a
    random given shape. A fresh draw per evaluation: no list of held-out shapes exists to read."""
    given = list(shapes.tuning) + list(shapes.heldout)
    limit = max(math.prod(_sizes(s).values()) for s in given) if given else 0
    drawn = []
    for _ in range(len(shapes.heldout)):
        shape = dict(rng.choice(given))
        for key in _sizes(shape):
            values = [s[key] for s in given if key in _sizes(s)]
            if len(set(values)) > 1:
                shape[key] = _draw_size(values, rng)
        while math.prod(_sizes(shape).values()) > limit:
            key = max(_sizes(shape), key=shape.get)
            values = [s[key] for s in given if key in _sizes(s)]
            step = _step(values)
            # halving may land on a power of two (1025 -> 512): the CPU exploit test once passed so
            smaller = _off_power_of_two(max(min(values), shape[key] // 2 // step * step), step)
            if smaller == shape[key]:
                break
            shape[key] = smaller
        drawn.append(shape)
    return tuple(drawn)


def nbytes(args: Iterable[object]) -> int:
    """Storage bytes of the tensors among `args`."""
    return sum(a.untyped_storage().nbytes() for a in args if isinstance(a, torch.Tensor))


def to_device(a, device):
    """A fresh copy on the device with the same strides (and the gaps between them): what the
    suites and the evaluator's workers hand a kernel, so layout bugs show up on both sides."""
    if isinstance(a, (list, tuple)) and type(a) in (list, tuple):
        return type(a)(to_device(x, device) for x in a)
    if not isinstance(a, torch.Tensor):
        return a
    base = torch.empty(0, dtype=torch.uint8, device=a.device).set_(a.untyped_storage()).to(device, copy=True)
    flat = torch.empty(0, dtype=a.dtype, device=device).set_(base.untyped_storage())
    return torch.as_strided(flat, a.shape, a.stride(), a.storage_offset())


def failure_line(e: BaseException) -> str:
    """An exception of a task's own code in one line, with where it was raised outside the
    engine's code and the libraries (a task file's reference: `/tmp/tasks/t.py:17`), if anywhere."""
    root = Path(__file__).resolve().parent.parent
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not _under(Path(f.filename), root)
              and "site-packages" not in f.filename and "/lib/python" not in f.filename]
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}{where}"


def _under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except ValueError:
        return False
