"""Find suites by name and tasks by (suite, name)."""
from __future__ import annotations

import difflib
import importlib

from suites.task import Task

# suite name -> module whose load(path) returns {task name: Task}
_SUITES = {"builtin": "suites.builtin", "tritonbench": "suites.tritonbench", "rocm": "suites.rocm",
           "kernelbench": "suites.kernelbench"}


class SuiteError(Exception):
    """Bad suite, task or filter: the message is meant for the user as it stands."""


class SuiteTasks(dict):
    """{task name: Task}, plus what could not be loaded (one line per file), so one bad file
    costs its own task and not the suite."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.problems: list[str] = []


def suite_names() -> list[str]:
    return sorted(_SUITES)


def did_you_mean(word: str, known) -> str:
    """' (did you mean X?)' for a near miss among `known`, else ''."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_suite(name: str, path: str | None = None) -> dict[str, Task]:
    """A registered suite by name (`path`: its data folder), or your own: `name` a task file or a
    folder of them (suites/user.py; `path` is then unused)."""
    if name not in _SUITES:
        from suites import user

        if user.looks_like_path(name):
            return user.load(name)
        raise SuiteError(f"unknown suite {name!r}{did_you_mean(name, suite_names())} "
                         f"(known: {', '.join(suite_names())}; or a task file or folder of them)")
    return importlib.import_module(_SUITES[name]).load(path)


def load_task(suite: str, name: str, path: str | None = None) -> Task:
    tasks = load_suite(suite, path)
    if name not in tasks:
        raise SuiteError(f"unknown task {name!r}{did_you_mean(name, tasks)} in suite {suite!r} "
                         f"(known: {', '.join(sorted(tasks))})")
    return tasks[name]


def select(tasks: dict[str, Task], names: str | None = None, difficulty: str | None = None,
           category: str | None = None) -> dict[str, Task]:
    """The subset the command-line filters ask for (comma-separated values); an empty result or
    an unknown name is the user's error."""
    chosen = SuiteTasks(tasks)
    chosen.problems = list(getattr(tasks, "problems", []))
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        missing = [n for n in wanted if n not in tasks]
        if missing:
            raise SuiteError("unknown task(s): " + ", ".join(m + did_you_mean(m, tasks) for m in missing))
        chosen = _keep(chosen, wanted)
    if difficulty:
        try:
            levels = {int(d) for d in difficulty.split(",") if d.strip()}
        except ValueError:
            raise SuiteError(f"--difficulty takes integers separated by commas, not {difficulty!r}") from None
        chosen = _keep(chosen, [n for n, t in chosen.items() if t.difficulty in levels])
    if category:
        cats = {c.strip() for c in category.split(",") if c.strip()}
        chosen = _keep(chosen, [n for n, t in chosen.items() if t.category in cats])
    if not chosen:
        raise SuiteError("no task matches the filters")
    return chosen


def _keep(tasks: SuiteTasks, names) -> SuiteTasks:
    kept = SuiteTasks((n, tasks[n]) for n in names)
    kept.problems = tasks.problems
    return kept
