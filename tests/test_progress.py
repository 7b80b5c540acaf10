"""Progress: the run's size, typed events, an ETA after the first minute, plain lines where
stderr is not a terminal and a live table where it is."""
import io

from rich.console import Console

from evolve.progress import Evaluated, GenerationDone, PlainView, Progress, RunSize, Tracker, make_view
from evolve.progress_live import render
from evolve.session import session_line


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_run_size_counts_the_start_the_first_mutants_and_each_generation():
    size = RunSize(tasks=3, islands=2, population=4, generations=5)
    assert size.per_task == 1 + 2 * 3 + 5 * 2 * 4 and size.evaluations == 3 * 47
    assert RunSize(3, 2, 4, 5, budget_evals=10).evaluations == 30
    assert "3 task(s) x 2 island(s) x 4 kernels x 5 generation(s): up to 141 evaluations" in size.line()


def test_plain_lines_give_generations_finished_tasks_and_an_eta_only_after_a_minute():
    clock, out = Clock(), io.StringIO()
    tracker = Tracker(RunSize(1, 1, 2, 10), done_before=3, clock=clock)  # 1 + 1 + 20 = 22 at most
    progress = Progress(tracker, PlainView(out, every_s=30))
    for _ in range(4):
        clock.now += 10
        progress(Evaluated("softmax"))
    progress(GenerationDone("softmax", 1, 10, 1.25, 2))
    assert "softmax: generation 1/10, best speedup 1.250x, 2 correct in the islands" in out.getvalue()
    assert "ETA" not in out.getvalue()  # 40 s in: the start-up still dominates the rate
    clock.now += 30
    progress(Evaluated("softmax"))  # 70 s, 5 evaluations: 14 left at 1 per 14 s
    last = out.getvalue().splitlines()[-1]
    assert "8/22 evaluations" in last and "ETA 3m16s" in last, last
    progress.task_done("softmax", "done")
    assert out.getvalue().splitlines()[-1].endswith("softmax: done (1/1 tasks finished)")
    assert "\x1b[" not in out.getvalue()  # no terminal codes in a log


def test_the_live_table_shows_each_task_and_the_overall_line():
    clock = Clock()
    tracker = Tracker(RunSize(2, 1, 2, 3), clock=clock, llm_stats=lambda: (7, 0.0123))
    progress = Progress(tracker, PlainView(io.StringIO()))
    progress(Evaluated("softmax"))
    progress(GenerationDone("softmax", 2, 3, 1.5, 1))
    progress(Evaluated("row_sum"))
    progress.task_done("row_sum", "target reached")
    out = io.StringIO()
    Console(file=out, width=100, force_terminal=False).print(render(tracker))
    text = out.getvalue()
    assert "2/16 evaluations" in text and "LLM calls 7, $0.0123" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:] if line.strip()}
    assert rows["softmax"][1:4] == ["2/3", "1.500x", "1"] and rows["row_sum"][-2:] == ["target", "reached"]


def test_a_stream_that_is_not_a_terminal_gets_plain_lines(monkeypatch):
    monkeypatch.delenv("TRITON_EVOLVE_PROGRESS", raising=False)
    assert isinstance(make_view(io.StringIO()), PlainView)
    monkeypatch.setenv("TRITON_EVOLVE_PROGRESS", "rich")
    assert type(make_view(io.StringIO())).__name__ == "LiveView"


def test_the_steady_state_begins_once_every_task_was_evaluated_or_ended_and_counts_only_what_follows():
    clock = Clock()
    tracker = Tracker(RunSize(3, 1, 2, 3), clock=clock)
    progress = Progress(tracker, PlainView(io.StringIO()))
    clock.now += 40
    progress(Evaluated("softmax"))
    progress(Evaluated("softmax"))
    progress.task_done("matmul", "invalid here")  # stopped at its starting kernel: it counts as seen
    assert progress.steady() is None  # row_sum not yet evaluated
    clock.now += 10
    progress(Evaluated("row_sum"))  # the last task's first evaluation: the steady state starts here
    assert progress.steady() == (0, 0.0)
    for _ in range(6):
        clock.now += 5
        progress(Evaluated("softmax"))
    assert progress.steady() == (6, 30.0) and tracker.evals == 9


def test_the_closing_line_gives_the_steady_rate_when_the_steady_state_lasted():
    stats = {"evaluations": 148, "wall_s": 225.0, "workers": 8, "correctness_busy_s": 900.0,
             "timing_busy_s": 70.0, "steady_evaluations": 70, "steady_s": 73.0}
    line = session_line(stats)
    assert line.startswith("148 evaluations in 225 s = 39.5/min (steady state, every task past its first "
                           "evaluation: 70 in 73 s = 57.5/min)"), line
    assert "steady" not in session_line({**stats, "steady_s": 5.0})  # too short to be a rate
    assert "steady" not in session_line({**stats, "steady_evaluations": None, "steady_s": None})
