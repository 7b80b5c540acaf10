"""Find suites by name and tasks by (suite, name)."""
from __future__ import annotations

import importlib

from suites.task import Task

# suite name -> module whose load(path) returns {task name: Task}
_SUITES = {"builtin": "suites.builtin"}


class SuiteError(Exception):
    """Bad suite, task or filter: the message is meant for the user as it stands."""


def suite_names() -> list[str]:
    return sorted(_SUITES)


def load_suite(name: str, path: str | None = None) -> dict[str, Task]:
    if name not in _SUITES:
        raise SuiteError(f"unknown suite {name!r} (known: {', '.join(suite_names())})")
    return importlib.import_module(_SUITES[name]).load(path)


def load_task(suite: str, name: str, path: str | None = None) -> Task:
    tasks = load_suite(suite, path)
    if name not in tasks:
        raise SuiteError(f"unknown task {name!r} in suite {suite!r} (known: {', '.join(sorted(tasks))})")
    return tasks[name]
