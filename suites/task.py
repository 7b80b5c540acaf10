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
    # {metric: bound}, the whole tensor is judged (fitness.common.metric_tolerance; user tasks only)
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
    # input distributions beside the task's own (VARIANTS' names) where the reference stays finite
    # and the task's tolerance still means what it says: an unsafe shortcut (softmax without the
    # max, a one-pass variance) passes on one distribution, not on all. Each evaluation cycles
    # its untimed cases through them (fitness.engine.judges)
    variants: tuple[str, ...] = ("scaled", "offset")
    # positions of the inputs the variants change; None: every floating-point tensor (a table of
    # cosines, a scale vector, may be left as drawn)
    varied: tuple[int, ...] | None = None
    # integer outputs are exact; True: a rounding rule (round half to even of a float quotient)
    # lets a value on a .5 boundary round either way (compare.INTEGER_TIE_SHARE). Never for
    # index outputs (int32, int64): an index off by one is wrong
    rounding_ties: bool = False

    # the positions of inputs the entry point updates in place: those inputs, after the call, are
    # the outputs compared (the reference mutates its own copies the same way); what it returns is
    # not looked at (user tasks, INPLACE)
    inplace: tuple[int, ...] = ()
    # torch work outside the Triton kernels is allowed (user tasks, TORCH_OPS = "allowed"): the
    # replay, which runs and times only the ops it recorded, still decides; its total time counts
    torch_ops: bool = False

    def __post_init__(self) -> None:
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"task {self.name}: unknown input variant(s) {unknown}; known: {sorted(VARIANTS)}")

    def case_key(self, case: dict, seed: int | None = None) -> tuple:
        """Identity of the inputs a case draws: what the input and reference caches key on."""
        seed = case["seed"] if seed is None else seed
        variant = case.get("variant", USUAL)  # the seed last: callers drop it for what it does not change
        key = (self.suite, self.name, repr(sorted(case["shape"].items())), case["dtype"])
        return key + ((variant,) if variant != USUAL else ()) + (seed,)

    def draw(self, case: dict, dtype: Any, gen: torch.Generator) -> tuple:
        """The case's inputs: make_inputs, then the case's input variant (if any) applied."""
        args = self.make_inputs(case["shape"], dtype, gen)
        variant = case.get("variant", USUAL)
        if variant == USUAL:
            return args
        if variant not in self.variants:
            raise ValueError(f"task {self.name} does not admit the input variant {variant!r}")
        return apply_variant(args, variant, self.varied)

    def draw_heldout(self, rng: random.Random, interpreter: bool) -> tuple[Shape, ...]:
        """Held-out shapes for one evaluation, drawn from the task's shape distribution, so no
        list of them exists for a candidate to read (sizes, non-powers of two, layout flags);
        each with a different size past the largest listed (see draw_shapes)."""
        shapes = self.shape_set(interpreter)
        growth = BEYOND_INTERPRETER if interpreter else BEYOND_GPU
        return draw_shapes(shapes, rng, beyond=len(shapes.heldout), growth=growth)

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


def draw_shapes(shapes: ShapeSet, rng: random.Random, beyond: int = 0, growth: float = 1.0) -> tuple[Shape, ...]:
    """As many shapes as the set's held-out list, each size drawn log-uniformly between the
    smallest and largest value the task's own shapes give it, rounded to a multiple of the
    power of two that all those values share (sizes given only as powers of two stay powers of
    two), and no larger in elements than the largest given shape; layout flags come from a
    random given shape. A fresh draw per evaluation: no list of held-out shapes exists to read.
    The first `beyond` shapes (at most one per free size) take one size past the largest listed
    (see _push_beyond), with at most `growth` times the largest given shape's elements."""
    given = list(shapes.tuning) + list(shapes.heldout)
    limit = max(math.prod(_sizes(s).values()) for s in given) if given else 0
    # which size each shape pushed beyond takes past the largest: a different one each, so that
    # with as many shapes as free sizes every size meets a value past its largest (a kernel
    # sized for the rows' length, or for their number)
    order = sorted({k for s in given for k in _sizes(s) if _free(k, given)})
    rng.shuffle(order)
    drawn = []
    for i in range(len(shapes.heldout)):
        shape = dict(rng.choice(given))
        for key in _sizes(shape):
            values = [s[key] for s in given if key in _sizes(s)]
            if len(set(values)) > 1:
                shape[key] = _draw_size(values, rng)
        pushed = _push_beyond(shape, given, rng, int(limit * growth), order[i:] + order[:i]) \
            if i < min(beyond, len(order)) else None
        _shrink(shape, given, int(limit * growth) if pushed else limit, keep=pushed)
        drawn.append(shape)
    return tuple(drawn)


def _shrink(shape: Shape, given: list[Shape], limit: int, keep: str | None = None) -> None:
    """Halves the largest size (not `keep`) until the shape holds at most `limit` elements."""
    def listed(key: str) -> list[int]:
        return [s[key] for s in given if key in _sizes(s)]

    while math.prod(_sizes(shape).values()) > limit:
        free = [k for k in _sizes(shape) if k != keep and shape[k] > min(listed(k))]
        if not free:
            break
        key = max(free, key=shape.get)
        values = listed(key)
        step = _step(values)
        # halving may land on a power of two (1025 -> 512): the CPU exploit test once passed so
        smaller = _off_power_of_two(max(min(values), shape[key] // 2 // step * step), step)
        if smaller == shape[key]:
            break
        shape[key] = smaller


def _push_beyond(shape: Shape, given: list[Shape], rng: random.Random, limit: int, order: list[str]) -> str | None:
    """Sets one free size (one the task lists more than one value for, not only powers of two)
    past the largest listed: past the power of two at or above it, so that a kernel whose block
    was sized to the largest listed shape (rounded up, as Triton's blocks are) meets a size it
    does not cover; odd where sizes need not be multiples of a power of two. The other sizes
    fall to their smallest listed values where the element limit needs it. Returns the key, or
    None where no size can grow within `limit`. `order`: the free sizes, the preferred first."""
    for key in (k for k in order if k in _sizes(shape)):
        values = [s[key] for s in given if key in _sizes(s)]
        step, top = _step(values), max(values)
        ceiling = 1 << (top - 1).bit_length()  # the power of two at or above the largest
        smallest = math.prod(min(s[k] for s in given if k in _sizes(s)) for k in _sizes(shape) if k != key)
        for n in (ceiling + step * rng.randint(1, max(1, ceiling // 4 // step)), ceiling + step):
            n = n | 1 if step == 1 else n
            if n * smallest <= limit:
                shape[key] = n
                return key
    return None


def _free(key: str, given: list[Shape]) -> bool:
    values = [s[key] for s in given if key in _sizes(s)]
    return len(set(values)) > 1 and not all(v & (v - 1) == 0 for v in values)


# how far past the largest listed shape's elements the shape pushed beyond may grow. On the CPU
# the Triton interpreter's cost bounds it: the pushed size's neighbours fall to their smallest
# listed values, so its programs are few (cumsum needs 2: 8193 x 3 against 4096 x 4)
BEYOND_INTERPRETER = 2.0
BEYOND_GPU = 2.0  # the engine keeps float64 references of up to 64M-element outputs: twice that, not more

USUAL = "usual"
SCALE = 16.0  # powers of two: exact in every float dtype, on every device
OFFSET = 64.0  # a one-pass variance in float32 fails layernorm at 64 (half its elements), a two-pass none
OUTLIER, OUTLIER_EVERY = 256.0, 61


def _scaled(a: torch.Tensor) -> None:
    a.mul_(SCALE)


def _offset(a: torch.Tensor) -> None:
    a.add_(OFFSET)


def _extreme(a: torch.Tensor) -> None:
    """One element in OUTLIER_EVERY (a fixed pattern: the same on every device) made OUTLIER
    times larger: the maxima and squares a kernel must not overflow."""
    idx = torch.arange(a.numel(), device=a.device).view(a.shape)
    a.mul_(torch.where(idx % OUTLIER_EVERY == 0, OUTLIER, 1.0).to(a.dtype))


# each changes a freshly drawn tensor in place, in its own dtype (so strides stay as drawn, and
# the same draw gives the same values in the engine and in every child)
VARIANTS: dict[str, Callable[[torch.Tensor], None]] = {"scaled": _scaled, "offset": _offset, "extreme": _extreme}


DESCRIBED = {"scaled": f"inputs scaled by {SCALE:g}", "offset": f"inputs offset by {OFFSET:g}",
             "extreme": f"one input element in {OUTLIER_EVERY} made {OUTLIER:g} times larger"}


def describe_variant(case: dict) -> str:
    """'' for the task's own distribution, else what the case's inputs were, for a reason."""
    variant = case.get("variant", USUAL)
    return "" if variant == USUAL else f"the {variant!r} input variant ({DESCRIBED[variant]})"


def apply_variant(args: tuple, variant: str, varied: tuple[int, ...] | None = None) -> tuple:
    """`args` with the variant applied to the floating-point tensors at `varied` (None: all)."""
    change = VARIANTS[variant]
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and (varied is None or i in varied):
            change(a)
    return args


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
