"""What every side of an evaluation computes alike: a case's inputs from a seed (the candidate's
child, the clean replay and timing, the engine's references), and how torch work is counted."""
from __future__ import annotations

from collections.abc import Iterator

import torch

from suites.task import Task

# torch work a candidate may do outside its kernels, as a share of its outputs (elements read or
# written by compute ops: a row reduction such as logsumexp writes few elements but reads all);
# checked in its child (an early filter) and on the replay by the engine
TORCH_WORK_SHARE = 0.01


def draw_inputs(task: Task, case: dict, seed: int, device: str = "cpu") -> tuple:
    """The case's inputs from `seed`, on `device` where the task can draw there (else on the
    host); a dtype that is not torch's ("given"): the suite's inputs come in their own dtypes.
    The same (task, case, seed, device) gives the same values in every process."""
    dtype = getattr(torch, case["dtype"], None)
    if device == "cpu" or not task.device_inputs:
        return task.draw(case, dtype, torch.Generator().manual_seed(seed))
    try:
        with torch.device(device):
            return task.draw(case, dtype, torch.Generator(device).manual_seed(seed))
    except torch.cuda.OutOfMemoryError:
        raise  # not a property of the suite's code: drawing elsewhere could give the other side other values
    except Exception:  # noqa: BLE001
        if task.script is None:
            raise
        # a suite's input maker that works on the host only (numpy on a tensor, devices mixed):
        # it fails on the device in every process alike, so both sides of a timing draw here
        return task.draw(case, dtype, torch.Generator().manual_seed(seed))


def work_elements(args: object, out: object) -> int:
    """Elements a compute op read or wrote, whichever is more: a row reduction (logsumexp)
    writes one element per row but reads the whole input."""
    read = sum(a.numel() for a in flat_items(args) if isinstance(a, torch.Tensor))
    written = sum(o.numel() for o in flat_items(out) if isinstance(o, torch.Tensor))
    return max(read, written)


def flat_items(x: object) -> Iterator[object]:
    """Every leaf of nested lists and tuples."""
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from flat_items(y)
    else:
        yield x


def poison_value(dtype: torch.dtype) -> float | bool | int:
    """What poisoned memory holds: NaN for floats, True for flags, the largest value for integers
    (here, and in the guard bands around a reference's inputs: fitness.clean.guard_bands)."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return True if dtype == torch.bool else torch.iinfo(dtype).max
