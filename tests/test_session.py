"""evolve/session.py's closing table, as run_search prints it at the end of a run (the stand-in
evaluator of tests/test_runner.py, the real archive and export)."""
import re

from fitness.engine.verdict import Verdict
from tests.test_runner import TASKS, StandIn, search


def _untimed(task, source):
    """What a machine without a GPU says of a correct kernel: correct, no speedup."""
    return Verdict(task.name, stage="correct", correct=True, heldout_correct=True, device="cpu (Triton interpreter)")


def _table(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("task "))
    return lines[start:start + 1 + len(TASKS)]


def test_a_run_that_timed_nothing_has_no_speedup_columns_in_its_closing_table(tmp_path, capsys):
    search(tmp_path, StandIn(judge=_untimed), generations=1)
    heading, *rows = _table(capsys.readouterr().out)
    assert heading.split() == ["task", "status", "evals", "(nothing", "timed", "here)"]
    assert all(" - " not in row and row.split()[3] != "-" for row in rows), rows
    assert rows[0].split()[:3] == [TASKS[0], "exported", "start"]


def test_a_timed_run_keeps_its_speedup_columns(tmp_path, capsys):
    search(tmp_path, StandIn(), generations=1)
    heading, *rows = _table(capsys.readouterr().out)
    assert heading.split() == ["task", "status", "speedup", "search", "vs", "start", "evals"]
    assert all(re.match(r"\S+ +exported( start)? +\d+\.\d{3} ", row) for row in rows), rows
