"""Progress on stderr: a line per finished generation of each task, and a throughput line at
most every `every_s` seconds. Plain lines rather than a redrawn bar: they read the same in a
terminal, a log file and CI, and need no extra dependency."""
from __future__ import annotations

import sys
import threading
import time


class Progress:
    def __init__(self, n_tasks: int, stream=None, every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.n_tasks = n_tasks
        self.every_s = every_s
        self.t0 = time.monotonic()
        self.evals = 0
        self.best: dict[str, float | None] = {}
        self.finished = 0
        self._last = self.t0
        self._lock = threading.Lock()

    def _say(self, text: str):
        print(f"[{time.monotonic() - self.t0:6.0f}s] {text}", file=self.stream, flush=True)

    def rate(self) -> float:
        return self.evals / max(time.monotonic() - self.t0, 1e-9)

    def __call__(self, event: dict):
        with self._lock:
            if "evaluated" in event:
                self.evals += event["evaluated"]
            if "generation" in event:
                self.best[event["task"]] = event["best"]
                best = f"{event['best']:.3f}x" if event["best"] else "-"
                self._say(f"{event['task']}: generation {event['generation']}/{event['of']}, best speedup {best}, "
                          f"{event['correct']} correct in the islands; {self.evals} evaluations, "
                          f"{self.rate():.2f}/s")
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._last = now
                self._say(f"{self.evals} evaluations ({self.rate():.2f}/s); tasks finished "
                          f"{self.finished}/{self.n_tasks}")

    def task_done(self, task: str, status: str) -> None:
        with self._lock:
            self.finished += 1
            self._say(f"{task}: {status} ({self.finished}/{self.n_tasks} tasks finished)")
