"""The live progress table (rich): the run's overall line and a row per task, redrawn in place.
Only imported where stderr is a terminal and rich is installed (evolve.progress.make_view)."""
from __future__ import annotations

from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from evolve.progress import Event, Tracker

MAX_ROWS = 30  # the busiest tasks first; a 184-task run would not fit a terminal


def render(tracker: Tracker) -> Group:
    table = Table(expand=False, box=None, pad_edge=False)
    for name, justify in (("task", "left"), ("generation", "right"), ("best", "right"), ("evals", "right"),
                          ("status", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    rows = sorted(tracker.tasks.items(), key=lambda kv: (kv[1].status != "searching", -kv[1].evals))
    for name, s in rows[:MAX_ROWS]:
        gen = f"{s.generation}/{s.of}" if s.generation >= 0 else "-"
        table.add_row(name, gen, f"{s.best:.3f}x" if s.best else "-", str(s.evals), s.status)
    more = len(rows) - MAX_ROWS
    footer = [Text(f"... and {more} more task(s)")] if more > 0 else []
    return Group(Text(f"[{tracker.elapsed():.0f}s] " + tracker.overall(), style="bold"), table, *footer)


class LiveView:
    def __init__(self, stream: TextIO) -> None:
        self.live: Live | None = None
        self.console = Console(file=stream)

    def _live(self, tracker: Tracker) -> Live:
        if self.live is None:
            self.live = Live(get_renderable=lambda: render(tracker), console=self.console,
                             refresh_per_second=2, transient=False)
            self.live.start()
        return self.live

    def event(self, tracker: Tracker, event: Event) -> None:
        self._live(tracker)

    def task_done(self, tracker: Tracker, task: str) -> None:
        self._live(tracker)

    def close(self, tracker: Tracker) -> None:
        if self.live is not None:
            self.live.refresh()
            self.live.stop()
            self.live = None
