"""A search's progress: what the task searches report (typed events), the run's size and an ETA
from the measured rate, shown as a live table in a terminal (rich) or as plain lines elsewhere
(a log file, CI, a pipe: they read the same there and need no redraw)."""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, TextIO

ETA_AFTER_S = 60.0  # the first minute's rate includes start-up (workers, references): no ETA before


@dataclass(frozen=True)
class Evaluated:
    """One candidate of `task` got its verdict."""

    task: str


@dataclass(frozen=True)
class GenerationDone:
    """A task finished a generation (0: the starting kernel and its first mutants)."""

    task: str
    generation: int
    of: int  # the run's last generation
    best: float | None  # the best speedup of a correct kernel so far (None: none timed)
    correct: int  # correct kernels in the task's islands


Event = Evaluated | GenerationDone


@dataclass(frozen=True)
class RunSize:
    """At most how many evaluations the run makes (duplicates are not evaluated again, so fewer)."""

    tasks: int
    islands: int
    population: int
    generations: int
    budget_evals: int | None = None  # per task

    @property
    def per_task(self) -> int:
        # the start, each island's first mutants, then a full brood per island and generation
        n = 1 + self.islands * (self.population - 1) + self.generations * self.islands * self.population
        return min(n, self.budget_evals) if self.budget_evals else n

    @property
    def evaluations(self) -> int:
        return self.tasks * self.per_task

    def line(self) -> str:
        budget = f", at most {self.budget_evals} per task" if self.budget_evals else ""
        return (f"run size: {self.tasks} task(s) x {self.islands} island(s) x {self.population} kernels x "
                f"{self.generations} generation(s){budget}: up to {self.evaluations} evaluations")


@dataclass
class TaskState:
    generation: int = -1
    of: int = 0
    best: float | None = None
    evals: int = 0
    status: str = "searching"


@dataclass
class Tracker:
    """The counts behind every view; `done_before` is what earlier sessions of the run evaluated."""

    size: RunSize
    done_before: int = 0
    clock: Callable[[], float] = time.monotonic
    llm_stats: Callable[[], tuple[int, float]] | None = None  # (calls, USD) of the run so far
    tasks: dict[str, TaskState] = field(default_factory=dict)
    evals: int = 0
    finished: int = 0
    # the steady state: from when every task of the session had its first evaluation back (or had
    # ended), the evaluations after it. The first ones pay for starting each task (its reference,
    # compile, the baseline's first timing: H100 TritonBench, 48 s before the first of 14 tasks)
    steady_from: float | None = None
    steady_evals: int = 0

    def __post_init__(self) -> None:
        self.t0 = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def per_min(self) -> float:
        return 60 * self.evals / max(self.elapsed(), 1e-9)

    def eta_s(self) -> float | None:
        """Seconds left at this session's rate, once a minute has passed (None before)."""
        if self.elapsed() < ETA_AFTER_S or not self.evals:
            return None
        left = max(0, self.size.evaluations - self.done_before - self.evals)
        return left / (self.evals / self.elapsed())

    def apply(self, event: Event) -> None:
        state = self.tasks.setdefault(event.task, TaskState())
        if isinstance(event, Evaluated):
            self.evals += 1
            state.evals += 1
            self.steady_evals += self.steady_from is not None
            self.mark_steady()
        else:
            state.generation, state.of, state.best = event.generation, event.of, event.best

    def mark_steady(self) -> None:
        """Starts the steady state once every task has been evaluated once or has ended."""
        seen = sum(1 for t in self.tasks.values() if t.evals or t.status != "searching")
        if self.steady_from is None and seen >= self.size.tasks:
            self.steady_from = self.clock()

    def steady(self) -> tuple[int, float] | None:
        """(evaluations, seconds) of the steady state so far; None before it began."""
        return None if self.steady_from is None else (self.steady_evals, self.clock() - self.steady_from)

    def overall(self) -> str:
        eta = self.eta_s()
        text = (f"{self.done_before + self.evals}/{self.size.evaluations} evaluations, {self.per_min():.1f}/min; "
                f"tasks finished {self.finished}/{self.size.tasks}")
        if self.llm_stats:
            calls, cost = self.llm_stats()
            text += f"; LLM calls {calls}, ${cost:.4f}"
        return text + (f"; ETA {clock_text(eta)}" if eta is not None else "")


def clock_text(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class View(Protocol):
    def event(self, tracker: Tracker, event: Event) -> None: ...

    def task_done(self, tracker: Tracker, task: str) -> None: ...

    def close(self, tracker: Tracker) -> None: ...


class PlainView:
    """A line per finished generation of each task and per finished task, and the overall line
    at most every `every_s` seconds."""

    def __init__(self, stream: TextIO, every_s: float = 30.0) -> None:
        self.stream, self.every_s = stream, every_s
        self._last = 0.0

    def _say(self, tracker: Tracker, text: str) -> None:
        print(f"[{tracker.elapsed():6.0f}s] {text}", file=self.stream, flush=True)

    def event(self, tracker: Tracker, event: Event) -> None:
        if isinstance(event, GenerationDone):
            best = f"{event.best:.3f}x" if event.best else "-"
            self._say(tracker, f"{event.task}: generation {event.generation}/{event.of}, best speedup {best}, "
                               f"{event.correct} correct in the islands; {tracker.evals} evaluations, "
                               f"{tracker.per_min():.1f}/min")
        if tracker.elapsed() - self._last >= self.every_s:
            self._last = tracker.elapsed()
            self._say(tracker, tracker.overall())

    def task_done(self, tracker: Tracker, task: str) -> None:
        self._say(tracker, f"{task}: {tracker.tasks[task].status} ({tracker.finished}/{tracker.size.tasks} "
                           "tasks finished)")

    def close(self, tracker: Tracker) -> None:
        pass


class Progress:
    """What the session calls: `progress(event)` from the task searches' threads, `task_done`
    when a task's search ends, `close` at the end of the session."""

    def __init__(self, tracker: Tracker, view: View) -> None:
        self.tracker, self.view = tracker, view
        self._lock = threading.Lock()

    @property
    def evals(self) -> int:
        return self.tracker.evals

    def steady(self) -> tuple[int, float] | None:
        with self._lock:
            return self.tracker.steady()

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.tracker.apply(event)
            self.view.event(self.tracker, event)

    def task_done(self, task: str, status: str) -> None:
        with self._lock:
            self.tracker.finished += 1
            self.tracker.tasks.setdefault(task, TaskState()).status = status
            self.tracker.mark_steady()
            self.view.task_done(self.tracker, task)

    def close(self) -> None:
        with self._lock:
            self.view.close(self.tracker)


def make_view(stream: TextIO | None = None) -> View:
    """The live table where stderr is a terminal and rich is installed (TRITON_EVOLVE_PROGRESS=plain
    or rich forces one), plain lines otherwise."""
    stream = stream or sys.stderr
    choice = os.environ.get("TRITON_EVOLVE_PROGRESS", "auto")
    terminal = stream.isatty() and os.environ.get("TERM", "") != "dumb"
    if choice == "rich" or (choice == "auto" and terminal):
        try:
            from evolve.progress_live import LiveView
        except ImportError:  # rich is not installed: plain lines
            return PlainView(stream)
        return LiveView(stream)
    return PlainView(stream)
