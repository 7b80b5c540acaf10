"""One searching command: every task's search side by side over one evaluator, stopped by the
time limit or Ctrl-C, and the session's throughput recorded in the archive."""
from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from archives.archive import Archive
from archives.metrics import aa_noise, session_rates, steady_rate
from archives.records import RunStatus
from evolve.config import RunConfig, SearchConfig
from evolve.evaluating import SearchEvaluator
from evolve.progress import Progress
from evolve.sentinels import Sentinels
from evolve.task_search import Halt, Shared, TaskEnd, TaskSearch
from operators.base import WeightedOperator
from suites.task import Task, failure_line

MAX_TASK_THREADS = 64
log = logging.getLogger(__name__)


class Session:
    def __init__(self, archive: Archive, run_id: int, tasks: dict[str, Task], evaluator: SearchEvaluator,
                 run: RunConfig, progress: Progress):
        self.archive, self.run_id, self.tasks, self.evaluator, self.run = archive, run_id, tasks, evaluator, run
        self.stop = threading.Event()
        self.progress = progress
        # candidates in flight: every slot of every evaluation unit (fitness.engine.evaluator.slots_per_unit)
        self.evals = ThreadPoolExecutor(evaluator.parallelism, thread_name_prefix="evaluate")
        self.sentinels = Sentinels(run.aa_every, archive, run_id, evaluator, self.evals, self.stop)
        self.ends: dict[str, TaskEnd] = {}

    def submit(self, task: Task, source: str) -> Future:
        def job() -> Any:
            if self.stop.is_set():
                return None  # not started before the stop: stays pending in the archive
            # after a stop, a candidate still waiting for a worker (or for the timing worker) gives
            # up and stays pending too: only requests already sent run to their end
            return self.evaluator.evaluate(task, source, cancel=self.stop.is_set)
        future = self.evals.submit(job)
        self.sentinels.after_submit(task)
        return future

    def search(self, operators: list[WeightedOperator], config: SearchConfig) -> tuple[bool, dict[str, TaskEnd]]:
        """(interrupted by Ctrl-C, how each task's search ended)."""
        t0, started = time.monotonic(), time.time()
        shared = Shared(self.archive, self.run_id, self.submit, self.stop, on_event=self.progress)

        def one(task: Task) -> None:
            try:
                end = TaskSearch(task, operators, config, shared).run()
            except Exception as e:  # noqa: BLE001 - e.g. a user task's reference that raises on a drawn shape
                log.info("the search of %s failed", task.name, exc_info=True)  # TRITON_EVOLVE_LOG=info
                end = TaskEnd(Halt.INVALID, f"its search failed: {failure_line(e)}")  # that task only
            self.ends[task.name] = end
            self.progress.task_done(task.name, str(end))

        timer = threading.Timer(self.run.time_limit, self.stop.set) if self.run.time_limit else None
        if timer:
            timer.daemon = True
            timer.start()
        # tasks side by side, not one batch after another: the evaluator's pool bounds the real work,
        # and under --time-limit a task queued behind others would never start (seen on the H100:
        # 7 of 15 builtin tasks got no evaluation in 250 s with 8 task threads)
        runner = ThreadPoolExecutor(min(len(self.tasks), max(MAX_TASK_THREADS, self.evaluator.parallelism)),
                                    thread_name_prefix="task")
        futures = [runner.submit(one, t) for t in self.tasks.values()]
        interrupted = False
        try:
            interrupted = _wait(futures, self.stop)
        finally:
            self.stop.set()
            self.progress.close()
            if timer:
                timer.cancel()
            for f in futures:
                if f.done() and f.exception() and not interrupted:
                    raise f.exception()  # type: ignore[misc]  # (exception() is not None here)
            runner.shutdown(wait=not interrupted, cancel_futures=True)
            self.evals.shutdown(wait=not interrupted, cancel_futures=True)
            wall = time.monotonic() - t0
        self._record(started, wall, interrupted)
        return interrupted, self.ends

    def _record(self, started: float, wall: float, interrupted: bool) -> None:
        ev = self.evaluator
        aa_speedups = self.archive.sentinel_speedups(self.run_id, since=started)
        aa = aa_noise(aa_speedups)
        busy = ev.measuring_s if ev.gpu else None
        steady = self.progress.steady()
        stats = {"started": started, "wall_s": round(wall, 3), "evaluations": self.progress.evals,
                 "workers": ev.workers, "gpus": ev.gpus,
                 "units": json.dumps([asdict(u) for u in ev.units(self.progress.evals)]),
                 "correctness_busy_s": round(ev.correctness_busy_s, 3),
                 "timing_busy_s": None if busy is None else round(busy, 3),
                 "status": run_status(interrupted, self.ends).value, "aa_n": len(aa_speedups),
                 "aa_median": aa[0] if aa else None, "aa_p90": aa[1] if aa else None,
                 "steady_evaluations": steady[0] if steady else None,
                 "steady_s": round(steady[1], 3) if steady else None}
        self.archive.add_session(self.run_id, stats)
        print(session_line(stats), flush=True)


def stop_note(end: TaskEnd | None) -> str:
    """'stopped: why' for a task whose search ended for a reason of its own (no LLM call nor
    evaluation is spent on it any more), '' otherwise."""
    if end is None or end.halt not in (Halt.INVALID, Halt.EXHAUSTED):
        return ""
    return f"stopped, {end}"


def run_status(interrupted: bool, ends: dict[str, TaskEnd]) -> RunStatus:
    """What a command's end leaves the run as."""
    if interrupted:
        return RunStatus.INTERRUPTED
    halts = {e.halt for e in ends.values()}
    if Halt.WAITING in halts:
        return RunStatus.WAITING
    # a model that never wrote code ended its tasks as if they were done: the run did not do its job
    if any(e.unusable for e in ends.values()):
        return RunStatus.FAILED
    return RunStatus.STOPPED if Halt.STOPPED in halts else RunStatus.FINISHED


def _wait(futures: list[Future], stop: threading.Event) -> bool:
    """Waits for the tasks' searches; True when Ctrl-C stopped them (a second Ctrl-C quits now)."""
    try:
        while not all(f.done() for f in futures):
            time.sleep(0.2)
        return False
    except KeyboardInterrupt:
        stop.set()
        print("stopping: the evaluations in flight finish and are recorded (Ctrl-C again to quit now)", flush=True)
        try:
            while not all(f.done() for f in futures):
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        return True


def session_line(s: dict[str, Any]) -> str:
    r = session_rates(s["evaluations"], s["wall_s"], s["workers"], s["correctness_busy_s"], s["timing_busy_s"],
                      s.get("gpus") or 1)
    line = f"{s['evaluations']} evaluations in {s['wall_s']:.0f} s = {r['per_min']:.1f}/min"
    steady = steady_rate(s.get("steady_evaluations"), s.get("steady_s"))
    if steady is not None:
        line += (f" (steady state, every task past its first evaluation: {s['steady_evaluations']} in "
                 f"{s['steady_s']:.0f} s = {steady:.1f}/min)")
    if r["timing_busy"] is not None:
        gpus = s.get("gpus") or 1
        line += (f"; GPU measuring turn held {100 * r['timing_busy']:.0f}% of the wall time"
                 + (f" (mean of {gpus} GPUs)" if gpus > 1 else ""))
    # which side bounds the throughput: near 100% here and low above means compile and
    # correctness starve the measuring turn
    line += f"; correctness workers busy {100 * r['correctness_busy']:.0f}%"
    if s.get("aa_n"):
        line += (f"; A/A sentinels: {s['aa_n']}, median |A/A - 1| {100 * s['aa_median']:.2f}%, "
                 f"p90 {100 * s['aa_p90']:.2f}%")
    return line


def print_summary(summary: dict[str, Any], export_dir: Path, ends: dict[str, TaskEnd] | None = None) -> None:
    """The closing table; `ends` (this command's) adds why a task stopped where it is no plain end
    (invalid here, operators exhausted, its search failed), so a task that got no LLM call says why."""
    def num(x: float | None) -> str:
        return f"{x:.3f}" if x else "-"
    # nothing timed (no GPU): three speedup columns of `-` under their headings read as a result
    any_timed = any(e.get("speedup") or e.get("search_speedup") for e in summary["tasks"])

    def speedups(e: dict[str, Any]) -> str:
        return f"{num(e.get('speedup')):>8} {num(e.get('search_speedup')):>8} {num(e.get('vs_start')):>8} " \
            if any_timed else ""
    heading = f"{'speedup':>8} {'search':>8} {'vs start':>8} " if any_timed else ""
    print(f"\n{'task':28} {'status':18} {heading}{'evals':>6}" + ("" if any_timed else "  (nothing timed here)"))
    for e in summary["tasks"]:
        end = (ends or {}).get(e["task"])
        failed = end is not None and end.halt is Halt.INVALID and e["status"] != "exported"
        status = "search failed" if failed else "exported start" if e.get("operator") == "start" else e["status"]
        notes = [n for n in (stop_note(end), e.get("note")) if n]
        if status == "exported start" and not notes:
            notes.append("the starting kernel: no candidate beat it" + ("" if e.get("speedup") or not any_timed
                                                                        else " (it was not timed here)"))
        print(f"{e['task']:28} {status:18} {speedups(e)}{e['evaluations']:>6}"
              + (f"  ({'; '.join(notes)})" if notes else ""))
    line = f"exported {summary['exported']}/{len(summary['tasks'])} to {export_dir}"
    if summary["geomean_speedup"]:
        line += f"; geometric-mean speedup {summary['geomean_speedup']:.3f}"
    if summary["geomean_vs_start"]:
        line += f", {summary['geomean_vs_start']:.3f} over the starting kernels"
    print(line)
