"""Static checks of the builtin task definitions (CPU only, start kernels are not run here).

Sizes in a shape are upper-case keys; lower-case keys are layout flags (see
suites/builtin/common.py).
"""
from __future__ import annotations

import ast

import pytest
import torch

from suites.registry import load_suite
from suites.task import Task

TASKS = load_suite("builtin")
NAMES = sorted(TASKS)

CATEGORIES = {
    "elementwise", "reduction", "normalization", "matmul", "attention", "loss", "scan", "memory",
    "quantization", "fused",
}


def _inputs(task: Task, shape, dtype: str, seed: int = 0):
    return task.make_inputs(shape, getattr(torch, dtype), torch.Generator().manual_seed(seed))


def _cast_floats(inputs, dtype):
    """What the evaluator does for the oracle: float tensors change dtype, the rest stay."""
    return tuple(
        a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in inputs
    )


def _tup(x):
    return x if isinstance(x, tuple) else (x,)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _within(task: Task, outs, refs, out_dtypes) -> bool:
    """True when every output is within the tolerance of its output dtype."""
    for out, ref, dt in zip(_tup(outs), _tup(refs), out_dtypes):
        atol, rtol = task.tolerance[dt]
        out, ref = out.double(), ref.double()
        if not bool(((out - ref).abs() <= atol + rtol * ref.abs()).all()):
            return False
    return True


def _sizes(shape) -> dict:
    return {k: v for k, v in shape.items() if k.isupper()}


def _flags(shapes) -> set:
    return {k for shape in shapes for k in shape if not k.isupper()}


def _all_shapes(task: Task):
    for interpreter in (False, True):
        ss = task.shape_set(interpreter)
        yield from ss.tuning
        yield from ss.heldout


def test_suite_size_and_categories():
    assert len(TASKS) >= 14
    assert CATEGORIES <= {t.category for t in TASKS.values()}
    for name, task in TASKS.items():
        assert task.name == name and task.suite == "builtin"


@pytest.mark.parametrize("name", NAMES)
def test_metadata(name):
    task = TASKS[name]
    assert task.interpreter_shapes is not None
    assert task.instruction and task.difficulty in (1, 2, 3, 4)
    for dt in task.dtypes:
        assert isinstance(getattr(torch, dt), torch.dtype)
    for shape in _all_shapes(task):
        assert _sizes(shape), shape
        assert all(isinstance(v, int) and v > 0 for v in _sizes(shape).values()), shape


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("interpreter", [False, True])
def test_heldout_shapes(name, interpreter):
    ss = TASKS[name].shape_set(interpreter)
    assert ss.tuning and ss.heldout
    assert not [s for s in ss.heldout if s in ss.tuning]
    non_pow2 = [s for s in ss.heldout if any(v & (v - 1) for v in _sizes(s).values())]
    assert non_pow2, "no held-out shape has a size that is not a power of two"


@pytest.mark.parametrize("name", NAMES)
def test_interpreter_shapes_carry_gpu_layout_flags(name):
    task = TASKS[name]
    assert _flags(task.shapes.heldout) == _flags(task.interpreter_shapes.heldout)


@pytest.mark.parametrize("name", NAMES)
def test_cost(name):
    task = TASKS[name]
    for shape in _all_shapes(task):
        for dt in task.dtypes:
            nbytes, flops = task.cost(shape, dt)
            # pure data movement (transpose_copy, embedding) honestly has zero flops
            assert nbytes > 0 and flops >= 0, (shape, dt)


@pytest.mark.parametrize("name", NAMES)
def test_make_inputs_deterministic(name):
    task = TASKS[name]
    shape, dt = task.interpreter_shapes.tuning[0], task.dtypes[0]
    a, b, c = _inputs(task, shape, dt, 0), _inputs(task, shape, dt, 0), _inputs(task, shape, dt, 1)
    assert len(a) == len(b) == len(c)
    differs = False
    for x, y, z in zip(a, b, c):
        if isinstance(x, torch.Tensor):
            assert x.device.type == "cpu"
            assert torch.equal(x, y) and x.stride() == y.stride()
            differs |= not torch.equal(x, z)
        else:
            assert x == y == z
    assert differs, "a different seed gave identical inputs"


@pytest.mark.parametrize("name", NAMES)
def test_layout_flags_give_strided_inputs(name):
    task = TASKS[name]
    for shape in task.interpreter_shapes.heldout:
        if _flags([shape]):
            inputs = _inputs(task, shape, task.dtypes[0])
            assert any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in inputs), shape


@pytest.mark.parametrize("name", NAMES)
def test_tolerance_covers_output_dtypes(name):
    task = TASKS[name]
    for dt in task.dtypes:
        for shape in task.interpreter_shapes.tuning:
            outs = _tup(task.reference(*_inputs(task, shape, dt)))
            for out in outs:
                assert _dtype_name(out) in task.tolerance, (dt, out.dtype)


@pytest.mark.parametrize("name", NAMES)
def test_reference_runs_on_meta(name):
    task = TASKS[name]
    shape, dt = task.interpreter_shapes.heldout[0], task.dtypes[0]
    inputs = _inputs(task, shape, dt)
    meta = tuple(
        torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
        if isinstance(a, torch.Tensor) else a
        for a in inputs
    )
    for m, real in zip(_tup(task.reference(*meta)), _tup(task.reference(*inputs))):
        assert m.shape == real.shape and m.dtype == real.dtype


@pytest.mark.parametrize("name", NAMES)
def test_tolerance_satisfiable(name):
    """Computing in float32 and rounding to the output dtype passes on every interpreter shape."""
    task = TASKS[name]
    ss = task.interpreter_shapes
    for dt in task.dtypes:
        for shape in ss.tuning + ss.heldout:
            inputs = _inputs(task, shape, dt)
            out_dtypes = [_dtype_name(o) for o in _tup(task.reference(*inputs))]
            oracle = task.reference(*_cast_floats(inputs, torch.float64))
            outs = tuple(
                o.to(getattr(torch, d))
                for o, d in zip(_tup(task.reference(*_cast_floats(inputs, torch.float32))), out_dtypes)
            )
            assert _within(task, outs, oracle, out_dtypes), (shape, dt)


@pytest.mark.parametrize("name", [n for n in NAMES if "float32" in TASKS[n].dtypes])
def test_tolerance_rejects_float16(name):
    """A float32 task computed in float16 must fail on at least one interpreter tuning shape."""
    task = TASKS[name]
    failed = False
    for shape in task.interpreter_shapes.tuning:
        inputs = _inputs(task, shape, "float32")
        out_dtypes = [_dtype_name(o) for o in _tup(task.reference(*inputs))]
        oracle = task.reference(*_cast_floats(inputs, torch.float64))
        low = _tup(task.reference(*_cast_floats(inputs, torch.float16)))
        failed |= not _within(task, low, oracle, out_dtypes)
    assert failed


@pytest.mark.parametrize("name", NAMES)
def test_start_source(name):
    task = TASKS[name]
    tree = ast.parse(task.start_source)
    assert ast.get_docstring(tree), "start kernel needs a docstring saying why it is slow"
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert task.entry in defs
    calls = {
        n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", None)
        for n in ast.walk(tree) if isinstance(n, ast.Call)
    }
    assert "print" not in calls and "contiguous" not in calls


@pytest.mark.parametrize("interpreter", [True, False])
def test_drawn_heldout_sizes_are_never_a_power_of_two_where_the_task_allows_any_size(interpreter):
    """A kernel right only for powers of two must meet a size it is wrong for in every draw
    (the size cap once halved 1025 to 512, and an exploit passed)."""
    import random

    from suites.task import _sizes, _step

    for task in TASKS.values():
        shapes = task.shape_set(interpreter)
        given = list(shapes.tuning) + list(shapes.heldout)
        for seed in range(200):
            for shape in task.draw_heldout(random.Random(seed), interpreter):
                for key, n in _sizes(shape).items():
                    values = [s[key] for s in given if key in _sizes(s)]
                    if len(set(values)) > 1 and _step(values) == 1:
                        assert n <= 2 or n & (n - 1), (task.name, key, shape)
