"""`run.py --suite S ...`: the search over every selected task, resumable, exported on exit.

Tasks run in threads, several at once; each submits its children to one shared evaluation
queue in front of the evaluator, whose correctness workers run in parallel beside the single
timing worker. So operators keep proposing while the GPU times, and the GPU always has work.
Stopping (time limit, Ctrl-C) stops new work; evaluations already running finish and are
recorded, the rest stay in the archive unevaluated and are picked up on resume.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from archives.archive import Archive
from archives.metrics import aa_noise, session_rates
from evolve.export import export
from evolve.llm_setup import LLMRun, llm_config, llm_run, temperatures
from evolve.progress import Progress
from evolve.sentinels import Sentinels
from evolve.task_search import SearchConfig, TaskSearch
from operators.registry import build as build_operators
from operators.registry import resolve as resolve_operators
from suites.registry import load_suite, select

WAITING = "waiting for LLM answers"
EXIT_WAITING = 3  # an --llm-exchange round is written and waits for its answers

# a resumed run must keep these; the others (generations, budgets) may grow between sessions
FIXED = ("suite", "suite_path", "islands", "population", "seed", "migration_interval", "operators",
         "baseline", "seeds")  # the last two: speedups and correctness of the sessions must compare


MAX_TASK_THREADS = 64


class SearchError(Exception):
    """Bad options or an archive that does not fit them; the message is meant for the user."""


def _check(args):
    problems = []
    if args.islands < 1:
        problems.append("--islands must be at least 1")
    if args.population < 2:
        problems.append("--population must be at least 2")
    if args.generations < 0:
        problems.append("--generations must be 0 or more")
    if args.migration_interval < 1:
        problems.append("--migration-interval must be at least 1")
    if args.budget_evals is not None and args.budget_evals < 1:
        problems.append("--budget-evals must be at least 1")
    if args.time_limit is not None and args.time_limit <= 0:
        problems.append("--time-limit must be positive")
    if args.max_debug < 1:
        problems.append("--max-debug must be at least 1")
    if args.aa_every < 0:
        problems.append("--aa-every must be 0 (none) or more")
    if problems:
        raise SearchError("; ".join(problems))


def _run_id(archive: Archive, config: dict, fresh: bool) -> tuple[int, str]:
    latest = archive.latest_run()
    if latest is None or fresh:
        return archive.new_run(config["suite"], config), "new run"
    old = latest["config"]
    for key in FIXED:
        if key in old and old.get(key) != config.get(key):  # (archives from before a key was kept lack it)
            flag = "--" + key.replace("_", "-")
            raise SearchError(f"archive {archive.path} holds run {latest['id']} made with {flag} {old.get(key)}; "
                              f"this command asks for {config.get(key)}: add --fresh to start a new run in it, "
                              "or give another --archive")
    archive.prepare_to_write()
    return latest["id"], f"resuming run {latest['id']}"


def _searchable(tasks, args, operators: str):
    """Leaves out, saying so, the tasks invalid on this machine (validate's record) and those with
    no starting kernel when no operator can write one."""
    from suites import validation

    record = validation.read(validation.record_path(args.suite, getattr(args, "validation", None)))
    invalid = validation.invalid_tasks(record)
    left_out = {n: f"invalid-here on {record.get('device')} ({invalid[n][:80]})" for n in tasks if n in invalid}
    if operators == "knobs":
        left_out.update({n: "no starting kernel (the knob operators need one; use --operators llm)"
                         for n, t in tasks.items() if not t.start_source})
    for n, why in left_out.items():
        print(f"left out {n}: {why}", flush=True)
    kept = {n: t for n, t in tasks.items() if n not in left_out}
    if not kept:
        raise SearchError("every selected task was left out (see above)")
    return kept


def run_search(args, make_evaluator) -> int:
    _check(args)
    name = resolve_operators(args.operators, args.model)
    llm = llm_config(args) if name != "knobs" else None  # every LLM problem is reported here, at start
    tasks = _searchable(select(load_suite(args.suite, args.suite_path), args.tasks, args.difficulty, args.category),
                        args, name)
    archive_path = Path(args.archive or f"runs/{args.suite}.db")
    # beside the archive and named after it: two archives of a suite never share their exports
    export_dir = Path(args.export) if args.export else archive_path.with_name(archive_path.stem + "-best")
    config = {"suite": args.suite, "suite_path": args.suite_path, "islands": args.islands,
              "population": args.population, "seed": args.seed, "migration_interval": args.migration_interval,
              "operators": name, "generations": args.generations, "model": args.model,
              "baseline": args.baseline, "seeds": args.seeds}
    evaluator = make_evaluator()
    try:
        archive = Archive(archive_path)
    except BaseException:
        evaluator.close()
        raise
    waiting = False
    try:
        run_id, how = _run_id(archive, config, args.fresh)
        llm_state: LLMRun | None = llm_run(llm, args, archive, run_id, tasks) if llm else None
        operators, operator_line = build_operators(name, llm_state.setup if llm_state else None, args.knob_rate,
                                                   explicit=args.operators is not None)
        search = SearchConfig(islands=args.islands, population=args.population, generations=args.generations,
                              migration_interval=args.migration_interval, seed=args.seed,
                              budget_evals=args.budget_evals, target_speedup=args.target_speedup,
                              temperatures=temperatures(args.temperature, args.islands) if llm else ())
        print(f"triton-evolve: suite {args.suite}, {len(tasks)} task(s), {args.islands} island(s) x "
              f"{args.population}, {args.generations} generation(s); archive {archive_path} ({how}); "
              f"operators: {operator_line}", flush=True)
        if llm_state:
            print(llm_state.start_line, flush=True)
        interrupted, statuses = _search(archive, run_id, tasks, search, operators, evaluator, args)
        summary = export(archive, run_id, args.suite, list(tasks), export_dir, args.suite_path,
                         retime=_retimer(evaluator, tasks))
        _report(summary, export_dir)
        if llm_state:
            print(llm_state.summary(), flush=True)
            waiting = WAITING in statuses.values()
            if waiting:
                path, n = llm_state.exchange.write_requests()
                print(f"waiting for LLM answers: wrote {n} request(s) to {path} (OpenAI Batch API input format); "
                      f"send them with `python run.py llm-batch {path.parent}` (or any Batch API runner that "
                      f"writes its output .jsonl into {path.parent}), then run this command again", flush=True)
        archive.set_status(run_id, run_status(interrupted, statuses))
    finally:
        evaluator.close()
        archive.close()
    return 130 if interrupted else EXIT_WAITING if waiting else 0


def _search(archive, run_id, tasks, search, operators, evaluator, args) -> bool:
    stop = threading.Event()
    progress = Progress(len(tasks))
    t0, started = time.monotonic(), time.time()
    # candidates in flight: every slot of every evaluation unit (fitness.evaluator.slots_per_unit)
    evals = ThreadPoolExecutor(evaluator.parallelism, thread_name_prefix="evaluate")

    sentinels = Sentinels(args.aa_every, archive, run_id, evaluator, evals, stop)

    def submit(task, source) -> Future:
        def job():
            if stop.is_set():
                return None  # not started before the stop: stays pending in the archive
            # after a stop, a candidate still waiting for a worker (or for the timing worker) gives
            # up and stays pending too: only requests already sent run to their end
            return evaluator.evaluate(task, source, cancel=stop.is_set)
        future = evals.submit(job)
        sentinels.after_submit(task)
        return future

    statuses = {}

    def one(task):
        ts = TaskSearch(task, archive, run_id, submit, operators, search, stop, on_event=progress)
        status = ts.run()
        statuses[task.name] = status
        progress.task_done(task.name, status)

    timer = threading.Timer(args.time_limit, stop.set) if args.time_limit else None
    if timer:
        timer.daemon = True
        timer.start()
    interrupted = False
    # tasks side by side, not one batch after another: the evaluator's pool bounds the real work,
    # and under --time-limit a task queued behind others would never start (seen on the H100:
    # 7 of 15 builtin tasks got no evaluation in 250 s with 8 task threads)
    runner = ThreadPoolExecutor(min(len(tasks), max(MAX_TASK_THREADS, evaluator.parallelism)),
                                thread_name_prefix="task")
    futures = [runner.submit(one, t) for t in tasks.values()]
    try:
        while not all(f.done() for f in futures):
            time.sleep(0.2)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        print("stopping: the evaluations in flight finish and are recorded (Ctrl-C again to quit now)", flush=True)
        try:
            while not all(f.done() for f in futures):
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
    finally:
        stop.set()
        if timer:
            timer.cancel()
        for f in futures:
            if f.done() and f.exception() and not interrupted:
                raise f.exception()
        runner.shutdown(wait=not interrupted, cancel_futures=True)
        evals.shutdown(wait=not interrupted, cancel_futures=True)
        wall = time.monotonic() - t0
        busy = evaluator.measuring_s if evaluator.gpu else None
    aa_speedups = archive.sentinel_speedups(run_id, since=started)
    aa = aa_noise(aa_speedups)
    units = [asdict(u) for u in evaluator.units(progress.evals)]
    stats = {"started": started, "wall_s": round(wall, 3), "evaluations": progress.evals,
             "workers": evaluator.workers, "gpus": evaluator.gpus, "units": json.dumps(units),
             "correctness_busy_s": round(evaluator.correctness_busy_s, 3),
             "timing_busy_s": None if busy is None else round(busy, 3), "status": run_status(interrupted, statuses),
             "aa_n": len(aa_speedups),
             "aa_median": aa[0] if aa else None, "aa_p90": aa[1] if aa else None}
    archive.add_session(run_id, stats)
    print(session_line(stats), flush=True)
    return interrupted, statuses


def session_line(s: dict) -> str:
    r = session_rates(s["evaluations"], s["wall_s"], s["workers"], s["correctness_busy_s"], s["timing_busy_s"],
                      s.get("gpus") or 1)
    line = f"{s['evaluations']} evaluations in {s['wall_s']:.0f} s = {r['per_min']:.1f}/min"
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


def run_status(interrupted: bool, statuses: dict[str, str]) -> str:
    """What a command's end leaves the run as; all but "finished" resume. "stopped": the time
    limit ended it with tasks unfinished."""
    if interrupted:
        return "interrupted"
    ends = set(statuses.values())
    return "waiting" if WAITING in ends else "stopped" if "stopped" in ends else "finished"


def _retimer(evaluator, tasks):
    """On a GPU, export times each winner again with the correctness workers idle."""
    if not evaluator.gpu:
        return None
    print("timing each task's best kernel (and its starting kernel) again, alone on the GPU", flush=True)

    def retime(name: str, source: str):
        return evaluator.retime(tasks[name], source).speedup
    return retime


def _report(summary: dict, export_dir: Path):
    def num(x):
        return f"{x:.3f}" if x else "-"
    print(f"\n{'task':28} {'status':18} {'speedup':>8} {'search':>8} {'vs start':>8} {'evals':>6}")
    for e in summary["tasks"]:
        print(f"{e['task']:28} {e['status']:18} {num(e.get('speedup')):>8} {num(e.get('search_speedup')):>8} "
              f"{num(e.get('vs_start')):>8} {e['evaluations']:>6}"
              + (f"  ({e['note']})" if e.get("note") else ""))
    line = f"exported {summary['exported']}/{len(summary['tasks'])} to {export_dir}"
    if summary["geomean_speedup"]:
        line += f"; geometric-mean speedup {summary['geomean_speedup']:.3f}"
    if summary["geomean_vs_start"]:
        line += f", {summary['geomean_vs_start']:.3f} over the starting kernels"
    print(line)
