"""Why a task's search ended: the Halt reasons and the TaskEnd a search returns.

Kept apart from evolve/task_search.py because the session, the runner and the LLM setup read a
search's outcome without needing the search itself: a small value type with no dependencies.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Halt(enum.Enum):
    """Why a task's search ended in this command."""

    DONE = "done"  # every generation made
    STOPPED = "stopped"  # time limit or Ctrl-C: resumes
    WAITING = "waiting for LLM answers"  # an exchange round waits for its answers: resumes
    TARGET = "target reached"
    BUDGET = "evaluation budget spent"
    EXHAUSTED = "no operators left"  # LLM budget spent, endpoint refused
    INVALID = "invalid here"  # the task's reference or starting kernel cannot be judged here
    PATIENCE = "no improvement (patience)"  # --patience generations without a better best speedup
    ROOFLINE = "at the roofline"  # --roofline-stop: the best kernel is near the roofline on every shape


@dataclass(frozen=True)
class TaskEnd:
    halt: Halt
    detail: str = ""  # what exhausted the operators, or why the task is invalid here
    saved_calls: int = 0  # an early stop: the LLM calls its remaining generations would have made
    unusable: bool = False  # exhausted because the model or endpoint cannot serve the run: the run failed

    def __str__(self) -> str:
        if self.halt is Halt.INVALID:
            return f"invalid here: {self.detail}"
        return self.detail if self.halt is Halt.EXHAUSTED and self.detail else self.halt.value
