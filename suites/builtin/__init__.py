"""The builtin suite: tasks written for triton-evolve, one module each."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from suites.task import Task


def load(path: str | None = None) -> dict[str, Task]:
    """`path` is accepted for symmetry with the data-backed suites and ignored."""
    tasks = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in ("common", "start"):
            continue
        task = importlib.import_module(f"{__name__}.{info.name}").TASK
        task = dataclasses.replace(task, device_inputs=True)  # all draw through their generator
        tasks[task.name] = task
    return tasks
