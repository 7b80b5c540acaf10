"""Whether a task is invalid here: its reference fails on this machine, or its start cannot be timed.

Separate from evolve/task_search.py because it reads only stored evaluations (a candidate's flags
and error), not the search's state: the search, and tests of a resumed run, ask it of any rows.
"""
from __future__ import annotations

from archives.records import Candidate
from fitness.common.flags import Flag
from fitness.engine.verdict import untimeable_start


def _first_line(reason: str) -> str:
    """A reason for one line: for a trace, its lead-in and the exception it ended with."""
    from suites.validation import brief

    return brief(reason, 200) if reason.strip() else "reference fails here"


def invalid_reason(c: Candidate) -> str:
    """Why no child of the task can be judged here, from one of its evaluations ('' : nothing
    says so): its reference fails on this machine, or (the starting kernel's) it cannot be timed.
    Every child descends from the start, and on a script task it is the baseline's own code: what
    the timing worker cannot time (a fault on the suite's benchmark inputs, a result that differs
    from itself) no child can be judged on, and each try may crash the timing worker, whose
    restart loses its caches (seen on the H100: TritonBench's token_softmax_llama and
    triton_attention cut the run's timing throughput by half)."""
    if c.evaluation is None:
        return ""
    if Flag.INVALID_HERE in c.flags:
        return _first_line(c.error)
    return untimeable_start(c.flags, c.error) if c.operator == "start" else ""


def known_invalid(rows: list[Candidate]) -> str:
    """What an earlier session of the run found: the first evaluation that makes the task invalid here."""
    return next((why for why in map(invalid_reason, rows) if why), "")
