"""The task model: what a kernel must compute, on which inputs, and how it is judged.

A task is data plus three small callables (reference, input maker, cost model). Callables
cannot cross a process boundary, so a worker rebuilds a task from (suite, name, suite_path)
through `suites.registry.load_task` instead of receiving it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

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
    # per *output* dtype: (atol, rtol); an element passes when |out-ref| <= atol + rtol*|ref|
    tolerance: dict[str, tuple[float, float]]
    # cost(shape, dtype) -> (bytes moved, flops) for one call: the roofline floor
    cost: Callable[[Shape, str], tuple[float, float]]
    start_source: str  # a correct, deliberately unoptimized Triton implementation
    instruction: str = ""
    difficulty: int | None = None
    # smaller shapes for the Triton interpreter on CPU, where GPU sizes would take minutes
    interpreter_shapes: ShapeSet | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    # data-backed suites: a suites.script.ScriptRunner that the worker calls instead of `entry` on
    # `make_inputs`; the reference is then `start_source` run the same way, not a torch function
    script: Any = None

    def case_key(self, case: dict, seed: int | None = None) -> tuple:
        """Identity of the inputs a case draws: what the input and reference caches key on."""
        seed = case["seed"] if seed is None else seed
        return (self.suite, self.name, repr(sorted(case["shape"].items())), case["dtype"], seed)

    def shape_set(self, interpreter: bool) -> ShapeSet:
        if interpreter and self.interpreter_shapes is not None:
            return self.interpreter_shapes
        return self.shapes
