"""`run.py --suite S ...`: the search over every selected task, resumable, exported on exit.

Tasks run in threads, several at once; each submits its children to one shared evaluation
queue in front of the evaluator, whose correctness workers run in parallel beside the single
timing worker. So operators keep proposing while the GPU times, and the GPU always has work.
Stopping (time limit, Ctrl-C) stops new work; evaluations already running finish and are
recorded, the rest stay in the archive unevaluated and are picked up on resume.

This page wires the search; it takes frozen configs (evolve/config.py), never argparse.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from archives.archive import Archive
from archives.records import RunStatus
from evolve.cli_options import program
from evolve.config import LLMConfig, RunConfig, SearchConfig
from evolve.config_file import FIXED, resume_conflicts
from evolve.device_identity import check_devices, machine_devices, retime_elsewhere
from evolve.evaluating import SearchEvaluator
from evolve.export import export
from evolve.llm_setup import LLMRun, llm_run, preflight
from evolve.output import stdout_outliving_its_reader
from evolve.progress import Progress, RunSize, Tracker, make_view
from evolve.session import Session, print_summary, run_status
from evolve.task_search import TaskEnd
from operators.registry import build as build_operators
from suites.registry import load_suite, select
from suites.task import Task

EXIT_WAITING = 3  # an --llm-exchange round is written and waits for its answers

__all__ = ["FIXED", "SearchError", "SearchResult", "run_search", "stored_config"]

class SearchError(Exception):
    """An archive that does not fit the options, or nothing to search; the message is meant for the user."""


@dataclass(frozen=True)
class SearchResult:
    run_id: int
    status: RunStatus  # what the run is left as
    ends: dict[str, TaskEnd]  # per task, why its search ended in this command
    summary: dict[str, Any]  # the export's summary (evolve/export.py)

    @property
    def exit_code(self) -> int:
        return {RunStatus.INTERRUPTED: 130, RunStatus.WAITING: EXIT_WAITING, RunStatus.FAILED: 1}.get(self.status, 0)


def stored_config(run: RunConfig, search: SearchConfig) -> dict[str, Any]:
    """What the archive keeps of a run's options (FIXED among them must match on resume): every
    option the command resolved, and the values the configs hold."""
    return {**run.options, "tasks": run.tasks, "difficulty": run.difficulty, "category": run.category,
            "suite": run.suite, "suite_path": run.suite_path, "islands": search.islands,
            "population": search.population, "seed": search.seed, "migration_interval": search.migration_interval,
            "operators": run.operators, "generations": search.generations, "model": run.model,
            "baseline": run.baseline, "seeds": run.seeds, "setting": search.setting}


def _run_id(archive: Archive, config: dict[str, Any], run: RunConfig,
            here: Callable[[], frozenset[str]]) -> tuple[int, str]:
    """The run this command searches, and how it says so; `here()` names this machine's device
    models, read only on a resume. A refused resume leaves the archive's bytes as they were."""
    latest = archive.latest_run()
    if latest is None or run.fresh:
        return archive.new_run(config["suite"], config), "new run"
    conflicts = resume_conflicts(latest.config, config, run.extend)
    if conflicts:
        raise SearchError(conflict_message(archive.path, latest.id, conflicts))
    devices = check_devices(archive, latest.id, here())
    if devices.moved and not run.retime:
        raise SearchError(devices.refusal(archive.path, latest.id))
    archive.prepare_to_write()
    archive.set_config(latest.id, config)
    how = f"resuming run {latest.id}"
    if devices.moved:
        print(retime_elsewhere(archive, latest.id, devices), flush=True)
        how += f", re-timed on {devices.here_text()}"
    return latest.id, how


def conflict_message(path: Any, run_id: int, conflicts: list[str]) -> str:
    return (f"archive {path} holds run {run_id} made with {'; '.join(conflicts)}: add --fresh to start "
            "a new run in it, or give another --archive")


def searchable(run: RunConfig) -> dict[str, Task]:
    """The selected tasks, leaving out, saying so, those invalid on this machine (validate's
    record) and those with no starting kernel when no operator can write one."""
    from suites import validation

    tasks = select(load_suite(run.suite, run.suite_path), run.tasks, run.difficulty, run.category)
    record = validation.read(validation.record_path(run.suite, run.validation))
    invalid = validation.invalid_tasks(record)
    left_out = {n: f"invalid-here on {record.get('device')} ({validation.brief(invalid[n], 120)})"
                for n in tasks if n in invalid}
    if run.operators == "knobs":
        left_out.update({n: "no starting kernel (the knob operators need one; use --operators llm)"
                         for n, t in tasks.items() if not t.start_source})
    for problem in getattr(tasks, "problems", []):  # a task file that could not be loaded: its task only
        print(f"left out {problem}", flush=True)
    for n, why in left_out.items():
        print(f"left out {n}: {why}", flush=True)
    kept = {n: t for n, t in tasks.items() if n not in left_out}
    if not kept:
        raise SearchError("every selected task was left out (see above)")
    return kept


def run_search(run: RunConfig, search: SearchConfig, llm: LLMConfig | None,
               make_evaluator: Callable[[], SearchEvaluator]) -> SearchResult:
    """The search, to its end (export, the run's status) even when its standard output closes
    under it (evolve.output: `| tee` stopped by the same Ctrl-C)."""
    with stdout_outliving_its_reader():
        return _run_search(run, search, llm, make_evaluator)


def _run_search(run: RunConfig, search: SearchConfig, llm: LLMConfig | None,
                make_evaluator: Callable[[], SearchEvaluator]) -> SearchResult:
    if llm is not None and not llm.exchange:
        preflight(llm.client)  # a bad key, URL or model is one line before any work
    tasks = searchable(run)
    evaluator = make_evaluator()
    try:
        archive = Archive(run.archive)
    except BaseException:
        evaluator.close()
        raise
    try:
        before = archive.latest_run()
        run_id, how = _run_id(archive, stored_config(run, search), run, lambda: machine_devices(evaluator))
        if before is not None and before.id == run_id and before.status == RunStatus.FINISHED.value \
                and not run.extend:
            print(f"run {run_id} in {run.archive} is finished: resuming it evaluates nothing new; to search on, "
                  f"add --extend --generations N (more than {search.generations}), or --fresh for a new run",
                  flush=True)
        llm_state: LLMRun | None = llm_run(llm, run, archive, run_id, search.setting) if llm else None
        operators, operator_line = build_operators(run.operators, llm_state.setup if llm_state else None,
                                                   run.knob_rate, explicit=run.operators_explicit)
        print(f"triton-evolve: suite {run.suite}, {len(tasks)} task(s), {search.islands} island(s) x "
              f"{search.population}, {search.generations} generation(s); archive {run.archive} ({how}); "
              f"operators: {operator_line}", flush=True)
        if llm_state:
            print(llm_state.start_line, flush=True)
        progress = _progress(archive, run_id, tasks, search, evaluator, llm_state)
        session = Session(archive, run_id, tasks, evaluator, run, progress)
        interrupted, ends = session.search(operators, search)
        status = run_status(interrupted, ends)
        # a run waiting for LLM answers exports what it has without timing it again alone: the
        # next round exports anew (on the H100 the re-timing of 12 TritonBench tasks outlasted the
        # round's own search)
        retime = _retimer(evaluator, tasks) if status is not RunStatus.WAITING else None
        summary = export(archive, run_id, run.suite, list(tasks), run.export, run.suite_path, retime=retime)
        print_summary(summary, run.export, ends)
        if llm_state:
            llm_state.finish(status is RunStatus.WAITING, ends)
        archive.set_status(run_id, status)
        hint = resume_hint(status, run)
        if hint:
            print(hint, flush=True)
    finally:
        evaluator.close()
        archive.close()
    return SearchResult(run_id, status, ends, summary)


def resume_hint(status: RunStatus, run: RunConfig) -> str:
    """How to go on with a run that ended with work left, as its last line ('' for none)."""
    resume = f"{program()} resume {run.archive}"
    if status is RunStatus.INTERRUPTED:
        return f"interrupted: what finished is kept; go on with `{resume}`"
    if status is RunStatus.STOPPED and run.time_limit:
        return (f"stopped by --time-limit {run.time_limit:g}: what finished is kept; go on with `{resume}` "
                f"(another {run.time_limit:g} s; --time-limit SECONDS to change it)")
    if status is RunStatus.FAILED:
        return (f"failed: the model could not be used (see above); what finished is kept; once it can, go on "
                f"with `{resume} --model MODEL` (or --base-url URL)")
    return ""


# said at the start of every run without a GPU: a user waiting for faster kernels should know at once
CPU_ONLY = ("correctness only: no speedups without a GPU, so the search cannot improve speed here "
            "(kernels run under the Triton interpreter; a child counts only as correct or not)")


def _progress(archive: Archive, run_id: int, tasks: dict[str, Task], search: SearchConfig,
              evaluator: SearchEvaluator, llm_state: LLMRun | None) -> Progress:
    """The run's size and what this machine measures, said once; the progress view of the run."""
    size = RunSize(len(tasks), search.islands, search.population, search.generations, search.budget_evals)
    done = sum(archive.evaluation_count(run_id, name) for name in tasks)
    print(size.line() + (f" ({done} evaluated before)" if done else "") + "; an ETA follows after the first minute",
          flush=True)
    print("measuring: " + ("correctness and speed on the GPU" if evaluator.gpu else CPU_ONLY), flush=True)
    tracker = Tracker(size, done_before=done, llm_stats=llm_state.calls_and_cost if llm_state else None)
    return Progress(tracker, make_view())


def _retimer(evaluator: SearchEvaluator, tasks: dict[str, Task]) -> Callable[[str, str], float | None] | None:
    """On a GPU, export times each winner again with the correctness workers idle."""
    if not evaluator.gpu:
        return None
    print("timing each task's best kernel (and its starting kernel) again, alone on the GPU", flush=True)

    def retime(name: str, source: str) -> float | None:
        return evaluator.retime(tasks[name], source).speedup
    return retime

