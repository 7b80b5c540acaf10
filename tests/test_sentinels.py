"""evolve/sentinels.py: A/A sentinels scheduled during a search, kept in the real archive, and
their noise in the closing line. The evaluator is a stand-in that reports a timing (no GPU
here); the archive is the real SQLite one."""
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from archives.archive import Archive
from archives.metrics import aa_noise
from evolve.sentinels import Sentinels
from evolve.session import session_line
from fitness.engine.verdict import Verdict


class TimingStandIn:
    gpu = True

    def __init__(self, speedups):
        self.speedups = list(speedups)
        self.asked = []

    def evaluate(self, task, source, cancel=None, aa=False):
        self.asked.append((task.name, source, aa))
        return Verdict(task=task.name, stage="timed", correct=True, heldout_correct=True,
                       speedup=self.speedups.pop(0))


def _run(tmp_path, builtin, every, evaluator, submits=7):
    archive = Archive(tmp_path / "a.db")
    run_id = archive.new_run("builtin", {})
    with ThreadPoolExecutor(2) as pool:
        s = Sentinels(every, archive, run_id, evaluator, pool, threading.Event())
        for _ in range(submits):
            s.after_submit(builtin["softmax"])
        for f in s.futures:
            f.result()
    return archive.sentinel_speedups(run_id)


def test_every_nth_evaluation_times_the_starting_kernel_against_itself(tmp_path, builtin):
    ev = TimingStandIn([1.01, 0.98])
    assert sorted(_run(tmp_path, builtin, 3, ev)) == [0.98, 1.01]
    assert ev.asked == [("softmax", builtin["softmax"].start_source, True)] * 2


def test_no_sentinels_when_asked_for_none_or_nothing_is_timed(tmp_path, builtin):
    assert _run(tmp_path, builtin, 0, TimingStandIn([])) == []
    untimed = TimingStandIn([])
    untimed.gpu = False
    assert _run(tmp_path / "b", builtin, 1, untimed) == [] and untimed.asked == []


def test_aa_noise_and_the_closing_line_by_hand():
    median, p90 = aa_noise([1.0, 1.02, 0.97, 1.1])
    assert abs(median - 0.025) < 1e-12 and abs(p90 - 0.1) < 1e-12
    assert aa_noise([]) is None
    line = session_line({"evaluations": 10, "wall_s": 60.0, "workers": 2, "correctness_busy_s": 60.0,
                         "timing_busy_s": 30.0, "aa_n": 4, "aa_median": median, "aa_p90": p90})
    assert "A/A sentinels: 4, median |A/A - 1| 2.50%, p90 10.00%" in line


@pytest.mark.slow
def test_a_sentinel_names_its_baseline_on_any_machine(evaluator, builtin):
    v = evaluator.evaluate(builtin["softmax"], builtin["softmax"].start_source, aa=True)
    assert "aa-sentinel" in v.flags and "A/A" in v.baseline and v.passed
