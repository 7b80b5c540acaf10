"""The load-time run of a user task's own code: make_inputs and the reference, once, on CPU.

Separate from suites/user.py, which reads and validates what a task file declares: this part
executes the user's functions on the smallest shape and turns their failures into one-line
SuiteErrors naming the file, the piece and the line.
"""
from __future__ import annotations

import math
import traceback
from pathlib import Path

import torch

from suites.registry import SuiteError
from suites.task import Task


def check_runs(task: Task, path: Path) -> None:
    """The task's own code, run once on its smallest CPU shape in its first dtype: make_inputs
    gives a tuple, the reference runs on it and on float64 copies (the correctness oracle), and
    gives tensors the task has a tolerance for. A SuiteError naming the file and the piece."""
    shapes = task.shape_set(interpreter=True)
    shape = dict(min(shapes.tuning + shapes.heldout, key=lambda s: math.prod(_int_sizes(s))))
    dtype = task.dtypes[0]
    at = f"on the smallest shape {shape} ({dtype})"
    try:
        args = task.make_inputs(dict(shape), getattr(torch, dtype), torch.Generator().manual_seed(0))
    except Exception as e:  # noqa: BLE001 - the user's code: its error, in one line
        raise SuiteError(f"{path}: make_inputs raised {at}: {_one_line(e, path)}") from None
    if not isinstance(args, (tuple, list)):
        raise SuiteError(f"{path}: make_inputs returned a {type(args).__name__}, not a tuple of the entry's "
                         "arguments: end it with `return (x,)` or `return x, y`")
    args = tuple(args)
    bad = [i for i in task.inplace if i >= len(args) or not isinstance(args[i], torch.Tensor)]
    if bad:
        raise SuiteError(f"{path}: INPLACE names input {bad[0]}, but make_inputs gives {len(args)} argument(s) "
                         f"and input {bad[0]} is not a tensor among them")
    outs = _run_reference(task, args, path, at)
    up = tuple(a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    _run_reference(task, up, path, f"{at} on float64 copies of the inputs (the correctness oracle)")
    for i, o in enumerate(outs):
        name = str(o.dtype).removeprefix("torch.")
        if name not in task.tolerance:
            raise SuiteError(f"{path}: reference output {i} is {name}, which has no tolerance: add TOLERANCE = "
                             f"{{\"{name}\": (atol, rtol)}}")


def _run_reference(task: Task, args: tuple, path: Path, at: str) -> list[torch.Tensor]:
    copies = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    try:
        with torch.no_grad():
            out = task.reference(*copies)
    except Exception as e:  # noqa: BLE001 - the user's code: its error, in one line
        raise SuiteError(f"{path}: reference raised {at}: {_one_line(e, path)}") from None
    changed = [i for i, (a, c) in enumerate(zip(args, copies)) if i not in task.inplace and isinstance(a, torch.Tensor)
               and not (a.shape == c.shape and a.dtype == c.dtype and _same_values(a, c))]
    if changed:  # candidates may not change inputs unless the task says which: its results would not count
        raise SuiteError(f"{path}: reference changes input {changed[0]} in place: declare INPLACE = "
                         f"({changed[0]},) if the kernel updates it (the updated inputs are then compared), or "
                         "let the reference work on a copy")
    if out is None:
        raise SuiteError(f"{path}: reference returned None: return its result, or declare INPLACE = (i,) "
                         "for the inputs it updates in place")
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    kinds = [type(o).__name__ for o in outs if not isinstance(o, torch.Tensor)]
    if not outs or kinds:
        raise SuiteError(f"{path}: reference must return a tensor or a tuple of tensors, not "
                         f"{type(out).__name__}" + (f" holding a {kinds[0]}" if kinds else ""))
    return outs


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, a NaN equal only to a NaN (nan_to_num would equate it with 0 and
    is not implemented for float8)."""
    return torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def _int_sizes(shape: dict) -> list[int]:
    return [v for k, v in shape.items() if k[:1].isupper() and isinstance(v, int)] or [1]


def _one_line(e: BaseException, path: Path) -> str:
    """`TypeError: ... (line N)`: the error, and where in the task file it was raised."""
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path.resolve()]
    text = " ".join(str(e).split())[:300]
    return f"{type(e).__name__}: {text}" + (f" (line {lines[-1]})" if lines else "")
