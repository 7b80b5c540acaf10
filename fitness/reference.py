"""float64 references computed in the engine process, cached by case.

Seeds are fresh for every evaluation (fitness.evaluator), so a reference is rarely asked for
twice; the cache keeps the ones computed lately, bounded in bytes, and makes threads that ask
for the same case at once wait for one computation. One case is computed at a time (each
already uses all of torch's CPU threads; seen on the H100 machine: 15 tasks computing theirs at
once made each comparison take 20 s). On a GPU machine the inputs are drawn and the references
computed and kept on the GPU, where the outputs are compared (a float64 matmul there takes
milliseconds, on the CPU seconds; drawing 64M elements on the CPU ~0.5 s); a reference that
cannot run on the GPU runs on the CPU from the same inputs.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch

from fitness.compare import as_list, dtype_name
from fitness.harness import draw_inputs
from suites.task import Task

DEVICE_BYTES = 2 << 30
# a case's float64 outputs, and the [(dtype, shape)] the candidate's outputs must have
Reference = tuple[list[torch.Tensor], list[tuple[str, tuple]]]


def default_bytes() -> int:
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 16 << 30
    return min(32 << 30, physical // 4)


class BytesLRU:
    """Values by key, the least recently used dropped once their bytes pass `max_bytes` (the
    newest is always kept). Not locked: its owner holds a lock around it."""

    def __init__(self, max_bytes: int, size: Callable[[Any], int]):
        self.max_bytes, self.size = max_bytes, size  # size(value) -> bytes
        self._items: OrderedDict = OrderedDict()
        self._bytes = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Any:
        """The value (now the most recently used); KeyError where there is none."""
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        self._items[key] = value
        self._bytes += self.size(value)
        while self._bytes > self.max_bytes and len(self._items) > 1:
            self._bytes -= self.size(self._items.popitem(last=False)[1])


class ReferenceCache:
    def __init__(self, max_bytes: int | None = None, device: str = "cpu"):
        if max_bytes is None:  # on the GPU: little, since fresh seeds leave little to reuse
            max_bytes = default_bytes() if device == "cpu" else DEVICE_BYTES
        self.max_bytes = max_bytes
        self.device = device
        self._items = BytesLRU(max_bytes, lambda value: sum(r.numel() * r.element_size() for r in value[0]))
        self._lock = threading.Lock()
        self._pending: dict[tuple, threading.Lock] = {}  # key -> lock held while that case is computed
        self._compute = threading.Lock()

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
            with self._compute:
                value = compute(task, case, self.device)
            with self._lock:
                self._items.put(key, value)
                self._pending.pop(key, None)
        return value


def compute(task: Task, case: dict, device: str = "cpu") -> Reference:
    """Drawn from the case's seed by the workers' own function, on the device they draw on;
    on a GPU the reference stays there, where the outputs are compared."""
    args = draw_inputs(task, case, case["seed"], device if device.startswith("cuda") else "cpu")
    expected = expected_outputs(task, args)
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


def expected_outputs(task: Task, args: tuple) -> list[tuple[str, tuple]]:
    """dtype and shape of each output for inputs in the task's dtype: meta tensors if possible."""
    try:
        meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
        outs = as_list(task.reference(*meta))
    except Exception:  # noqa: BLE001 - some ops have no meta kernel: run it for real, once
        outs = as_list(task.reference(*args))
    return [(dtype_name(o), tuple(o.shape)) for o in outs]
