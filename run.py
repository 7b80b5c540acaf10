"""triton-evolve command line. Thin: parses arguments and hands off to the packages."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

COMMANDS = ("search", "check", "validate", "list", "llm-batch", "report")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _common(p: argparse.ArgumentParser):
    p.add_argument("--suite", default="builtin", help="builtin, tritonbench, rocm or kernelbench")
    p.add_argument("--suite-path", default=None, help="folder holding the suite's data (else $TRITON_EVOLVE_DATA, "
                   "else a per-user cache filled by download)")
    p.add_argument("--validation", default=None, metavar="FILE",
                   help="validate's record of the tasks invalid here (default runs/<suite>-validation.json)")


def _eval_opts(p: argparse.ArgumentParser):
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cpu runs kernels under the Triton interpreter, untimed")
    p.add_argument("--seeds", default="0,1", help="input seeds, comma separated (default 0,1)")
    p.add_argument("--workers", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                   help="parallel correctness workers (default: half the CPU cores, at most 8)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for one candidate's correctness run")
    p.add_argument("--trials", type=int, default=21, help="interleaved timing trials per shape")
    p.add_argument("--baseline", choices=("reference", "start"), default="reference",
                   help="time against the PyTorch reference or the task's starting kernel")
    p.add_argument("--no-sandbox", action="store_true", help="run workers without bubblewrap")
    p.add_argument("--mem-limit", type=float, default=16.0, metavar="GB",
                   help="host memory per worker (default 16; KernelBench's largest inputs need more)")


def _search_opts(p: argparse.ArgumentParser):
    p.add_argument("--islands", type=int, default=4, help="islands per task (default 4)")
    p.add_argument("--population", type=int, default=8, help="individuals per island (default 8)")
    p.add_argument("--generations", type=int, default=10, help="generations per task (default 10)")
    p.add_argument("--migration-interval", type=int, default=3,
                   help="generations between migrations along the ring (default 3)")
    p.add_argument("--seed", type=int, default=0,
                   help="the search's random seed: the same seed and options give the same run (default 0)")
    p.add_argument("--archive", default=None, help="SQLite archive (default runs/<suite>.db)")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="export folder (default: beside the archive, named after it: runs/x.db -> runs/x-best)")
    p.add_argument("--operators", default=None, help="knobs, llm or both (default: llm when one is "
                   "configured, else knobs)")
    p.add_argument("--budget-evals", type=int, default=None, help="stop a task after this many evaluations")
    p.add_argument("--time-limit", type=float, default=None, help="stop the run after this many seconds")
    p.add_argument("--aa-every", type=int, default=25, metavar="N",
                   help="GPU: after every N evaluations, time a starting kernel against itself (an A/A "
                   "sentinel: the timing noise under the search's load); 0: none (default 25)")
    p.add_argument("--target-speedup", type=float, default=None, help="stop a task once this speedup is reached")
    p.add_argument("--fresh", action="store_true", help="start a new archive even if one exists")
    _cluster_opts(p)
    g = p.add_argument_group("LLM operators (any OpenAI-compatible endpoint; the key comes from OPENAI_API_KEY)")
    g.add_argument("--model", default=None, help="model name; setting one makes --operators llm the default")
    g.add_argument("--base-url", default=None, help="endpoint, e.g. http://localhost:8000/v1 "
                   "(default: OPENAI_BASE_URL, else OpenAI's)")
    g.add_argument("--temperature", default="0.6,1.2", metavar="LO[,HI]",
                   help="sampling temperatures, spread across the islands (default 0.6,1.2)")
    g.add_argument("--llm-concurrency", type=int, default=8, help="LLM calls in flight at once (default 8)")
    g.add_argument("--llm-timeout", type=float, default=300.0, help="seconds for one LLM call (default 300)")
    g.add_argument("--llm-retries", type=int, default=5, help="retries on 429, 5xx and timeouts (default 5)")
    g.add_argument("--max-tokens", type=int, default=8192, help="completion tokens per call (default 8192)")
    g.add_argument("--max-cost", type=float, default=None, help="USD the run may spend on LLM calls, all "
                   "sessions together; never exceeded (in-flight calls count)")
    g.add_argument("--max-llm-calls", type=int, default=None, help="LLM calls the run may make, all sessions")
    g.add_argument("--llm-price", default=None, metavar="IN,OUT",
                   help="USD per million prompt and completion tokens (overrides the built-in table)")
    g.add_argument("--max-debug", type=int, default=5,
                   help="failed repairs of one lineage before it is dropped for a fresh kernel (default 5)")
    g.add_argument("--knob-rate", type=float, default=0.3,
                   help="with --operators both: the share of children from knob operators (default 0.3)")
    g.add_argument("--llm-exchange", default=None, metavar="DIR",
                   help="no network: write each round's LLM requests to DIR/requests.jsonl (Batch API format) "
                   "and stop (exit 3); run again once DIR holds the Batch API output .jsonl")


def _cluster_opts(p: argparse.ArgumentParser):
    g = p.add_argument_group("evaluation on a Dask cluster (needs the [cluster] extra)")
    g.add_argument("--cluster", default="local", metavar="WHERE",
                   help="local (default: this process's pools, no Dask), gpus (a unit per GPU of this machine), "
                   "slurm (dask-jobqueue jobs, one GPU each), or a scheduler's address tcp://HOST:8786")
    g.add_argument("--cluster-attempts", type=int, default=3, metavar="N",
                   help="units a candidate may kill before it is failed (default 3)")
    g.add_argument("--cluster-jobs", type=int, default=1, metavar="N", help="slurm: jobs (GPUs) to submit")
    g.add_argument("--cluster-partition", default=None, help="slurm: partition")
    g.add_argument("--cluster-account", default=None, help="slurm: account")
    g.add_argument("--cluster-walltime", default="04:00:00", help="slurm: each job's time limit (default 04:00:00)")
    g.add_argument("--cluster-job-cores", type=int, default=16, help="slurm: CPU cores per job (default 16)")
    g.add_argument("--cluster-job-memory", default="64GB", help="slurm: host memory per job (default 64GB)")


def _cluster_config(args):
    """--cluster and its options checked, as a fitness.cluster.ClusterConfig (None: local)."""
    where = args.cluster
    if where == "local":
        return None
    if where not in ("gpus", "slurm") and "://" not in where:
        raise UsageError(f"--cluster takes local, gpus, slurm or a scheduler address (tcp://HOST:PORT), not {where!r}")
    if args.cluster_attempts < 1 or args.cluster_jobs < 1 or args.cluster_job_cores < 1:
        raise UsageError("--cluster-attempts, --cluster-jobs and --cluster-job-cores must be at least 1")
    try:
        from fitness.cluster import ClusterConfig
    except ImportError as e:
        raise UsageError(f"--cluster {where} needs Dask ({e.name} is missing): pip install -e '.[cluster]'") from None
    return ClusterConfig(where=where, attempts=args.cluster_attempts, jobs=args.cluster_jobs,
                         partition=args.cluster_partition, account=args.cluster_account,
                         walltime=args.cluster_walltime, job_cores=args.cluster_job_cores,
                         job_memory=args.cluster_job_memory)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run.py", description="Evolve faster Triton kernels.")
    parser.add_argument("--version", action="version", version=f"triton-evolve {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("search", help="the evolutionary search (the default command)")
    _common(p)
    _eval_opts(p)
    _filters(p)
    _search_opts(p)
    p = sub.add_parser("check", help="evaluate one candidate kernel file; prints a JSON verdict")
    _common(p)
    _eval_opts(p)
    p.add_argument("--task", required=True)
    p.add_argument("kernel", help="path to the candidate's Python file")
    p = sub.add_parser("validate", help="evaluate every task's starting kernel")
    _common(p)
    _eval_opts(p)
    _filters(p)
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument("--no-time", action="store_true", help="check that references run, without timing them")
    p.add_argument("--pending", action="store_true", help="only the tasks the validation record lacks")
    p = sub.add_parser("llm-batch", help="send DIR/requests.jsonl through the OpenAI Batch API, wait, and "
                       "write the answers into DIR")
    p.add_argument("dir", help="the --llm-exchange folder")
    p.add_argument("--base-url", default=None, help="default: OPENAI_BASE_URL, else OpenAI's")
    p.add_argument("--poll", type=float, default=30.0, help="seconds between status checks (default 30)")
    p = sub.add_parser("list", help="list the tasks of a suite")
    _common(p)
    _filters(p)
    p.add_argument("--json", action="store_true", help="print the tasks as JSON, starting kernels included")
    p = sub.add_parser("report", help="metrics, tables and plots of an archive (finished or still running)")
    p.add_argument("--archive", required=True, help="the SQLite archive of a search (read-only)")
    p.add_argument("--out", default="report", help="folder for index.html, summary.md, plots (default report/)")
    p.add_argument("--json", action="store_true", help="also print the report as JSON on stdout")
    p.add_argument("--run", type=int, default=None, help="run id in the archive (default: the latest)")
    p.add_argument("--invalid", default=None, metavar="FILE",
                   help="JSON of tasks invalid on this hardware (names, or `validate --json` output)")
    return parser


def _evaluator(args):
    from fitness.evaluator import EvalConfig, Evaluator

    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        raise UsageError(f"--seeds takes integers separated by commas, not {args.seeds!r}") from None
    if args.workers < 1 or args.trials < 3 or args.timeout <= 0:
        raise UsageError("--workers must be >= 1, --trials >= 3 and --timeout > 0")
    config = EvalConfig(seeds=seeds, workers=args.workers, device=args.device, timeout_s=args.timeout,
                        trials=args.trials, baseline=args.baseline, sandbox=not args.no_sandbox,
                        suite_path=args.suite_path, mem_limit_gb=args.mem_limit)
    cluster = _cluster_config(args) if hasattr(args, "cluster") else None
    try:
        if cluster is not None:
            from fitness.cluster import ClusterError, ClusterEvaluator
            try:
                return ClusterEvaluator(config, cluster)
            except ClusterError as e:
                raise UsageError(str(e)) from None
        return Evaluator(config)
    except RuntimeError as e:
        raise UsageError(str(e)) from None


def _load(args):
    from suites.registry import load_suite

    return load_suite(args.suite, args.suite_path)


def _selected(args):
    from suites.registry import select

    return select(_load(args), args.tasks, getattr(args, "difficulty", None), getattr(args, "category", None))


def _filters(p: argparse.ArgumentParser):
    p.add_argument("--tasks", default=None, help="comma-separated task names")
    p.add_argument("--difficulty", default=None, help="comma-separated difficulty levels, e.g. 3,4")
    p.add_argument("--category", default=None, help="comma-separated categories")


def cmd_check(args) -> int:
    from fitness.static_gate import MAX_SOURCE_BYTES

    tasks = _load(args)
    if args.task not in tasks:
        raise UsageError(f"unknown task {args.task!r} in suite {args.suite!r}")
    path = args.kernel
    if not os.path.isfile(path):
        raise UsageError(f"cannot read kernel file {path!r}: no such file")
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            raise UsageError(f"kernel file {path!r} is over {MAX_SOURCE_BYTES} bytes")
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise UsageError(f"cannot read kernel file {path!r}: {e.strerror}") from None
    with _evaluator(args) as ev:
        verdict = ev.evaluate(tasks[args.task], source)
    print(json.dumps(verdict.to_dict(), indent=1))
    return 0


def _validation_path(args):
    from suites.validation import record_path

    return record_path(args.suite, args.validation)


def cmd_validate(args) -> int:
    from suites import validation

    tasks = _selected(args)
    _warn_problems(tasks)
    path = _validation_path(args)
    if args.pending:  # what an earlier, cut-short validate did not get to
        done = validation.read(path).get("tasks", {})
        tasks = {n: t for n, t in tasks.items() if n not in done}
        print(f"{len(done)} task(s) already in {path}; validating the {len(tasks)} others", flush=True)
    if not args.json:
        print(f"{'task':40} {'status':12} {'held-out':8} {'speedup':>8}  note", flush=True)
    try:
        verdicts, entries = _validate_pass(args, tasks, path)
    except KeyboardInterrupt:
        done = len(validation.read(path).get("tasks", {}))
        print(f"interrupted: {done} task(s) recorded in {path}; `validate --pending` goes on from there",
              file=sys.stderr)
        return 130
    # a reference that ran out of GPU memory or faulted while other workers shared the GPU gets
    # a second chance with the GPU to itself: that failure may not be its own
    retry = [n for n, e in entries.items() if e["status"] == validation.INVALID
             and validation.shared_gpu_failure(e["reason"])]
    if retry and args.workers > 1:
        print(f"retrying {len(retry)} task(s) alone, with the GPU to themselves: {', '.join(sorted(retry))}",
              flush=True)
        again, more = _validate_pass(argparse.Namespace(**{**vars(args), "workers": 1}),
                                     {n: tasks[n] for n in retry}, path)
        verdicts = [v for v in verdicts if v.task not in more] + again
        entries.update(more)
    if args.json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=1))
        return 0
    ok = sum(v.passed for v in verdicts)
    timed = [v.speedup for v in verdicts if v.speedup is not None]
    what = "references" if any(t.script is not None for t in tasks.values()) else "starting kernels"
    line = f"{ok}/{len(verdicts)} {what} correct (tuning and held-out cases)"
    if timed:
        from fitness.verdict import geomean

        line += f"; geometric-mean speedup vs {verdicts[0].baseline}: {geomean(timed):.3f} over {len(timed)} timed"
    else:
        line += "; " + (verdicts[0].timing if verdicts and verdicts[0].timing else "none timed")
    print(line)
    print(f"device: {verdicts[0].device if verdicts else '?'}; sandbox: {verdicts[0].sandbox if verdicts else '?'}")
    if entries:
        record = validation.read(path)
        for text in validation.summary(record["tasks"]):
            print(text)
        print(f"recorded in {path} ({len(record['tasks'])} task(s) so far)")
    return 0


def _validate_pass(args, tasks: dict, path) -> tuple[list, dict]:
    """Runs the tasks' references, printing and recording each as it finishes (a validate cut
    short keeps what it learned)."""
    from suites import validation

    verdicts, entries = [], {}
    with _evaluator(args) as ev:
        for v in ev.validate_iter(list(tasks.values()), timed=not args.no_time):
            task = tasks[v.task]
            weak = task.script is not None and not ev.reference_status(task) and ev.script_refs.get(task).weak
            verdicts.append(v)
            if v.device:
                entries[v.task] = validation.entry(v, weak)
                validation.merge(path, args.suite, v.device, {v.task: entries[v.task]})
            if not args.json:
                sp = f"{v.speedup:.3f}" if v.speedup is not None else "-"
                status = "invalid-here" if "invalid-here" in v.flags else v.stage
                note = ("weak-test " if weak else "") + \
                    ("" if v.passed else validation.short_reason(v.reason)[:110] if v.reason else "")
                print(f"{v.task:40} {status:12} {'ok' if v.heldout_correct else 'FAIL':8} {sp:>8}  {note}", flush=True)
    return verdicts, entries


def _warn_problems(tasks):
    for p in getattr(tasks, "problems", []):
        print(f"warning: {p}", file=sys.stderr)


def cmd_list(args) -> int:
    from collections import Counter

    from suites import validation

    tasks = _selected(args)
    _warn_problems(tasks)
    marks = validation.read(_validation_path(args)).get("tasks", {})

    def tags(name):
        e = marks.get(name, {})
        return ",".join(t for t, on in (("invalid-here", e.get("status") == validation.INVALID),
                                        ("weak-test", e.get("weak_test"))) if on)
    if args.json:
        print(json.dumps([{"name": t.name, "category": t.category, "entry": t.entry, "dtypes": list(t.dtypes),
                           "difficulty": t.difficulty, "marks": tags(t.name), "instruction": t.instruction,
                           "start_source": t.start_source} for t in tasks.values()], indent=1))
        return 0
    print(f"{'task':40} {'category':14} {'diff':4} {'entry':28} marks")
    for t in tasks.values():
        print(f"{t.name:40} {t.category:14} {t.difficulty if t.difficulty is not None else '-'!s:4} "
              f"{t.entry:28} {tags(t.name)}")
    print(f"{len(tasks)} tasks in suite {args.suite!r}")
    diff = Counter(t.difficulty for t in tasks.values())
    print("by difficulty: " + ", ".join(f"{d if d is not None else '-'}: {n}"
                                         for d, n in sorted(diff.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))))
    cats = Counter(t.category for t in tasks.values())
    print("by category: " + ", ".join(f"{c}: {n}" for c, n in sorted(cats.items())))
    if not marks:
        print(f"(no validation record at {_validation_path(args)}: "
              "run validate to mark invalid-here and weak-test tasks)")
    return 0


def cmd_search(args) -> int:
    from archives.archive import ArchiveError
    from evolve.runner import SearchError, run_search
    from operators.registry import OperatorError

    try:
        return run_search(args, lambda: _evaluator(args))
    except (SearchError, ArchiveError, OperatorError) as e:
        raise UsageError(str(e)) from None


def cmd_llm_batch(args) -> int:
    from operators.llm_exchange import ExchangeError, send_batch

    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        raise UsageError("llm-batch needs an API key in OPENAI_API_KEY")
    if args.poll <= 0:
        raise UsageError("--poll must be positive")
    try:
        send_batch(args.dir, key, args.base_url or os.environ.get("OPENAI_BASE_URL") or None, args.poll,
                   say=lambda m: print(m, flush=True))
    except ExchangeError as e:
        raise UsageError(str(e)) from None
    return 0


def cmd_report(args) -> int:
    from archives.report import cmd_report as report

    return report(args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton-evolve")
    except PackageNotFoundError:  # a checkout that was never installed
        import tomllib

        return tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["project"]["version"]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from suites.registry import SuiteError, did_you_mean

    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}{did_you_mean(argv[0], COMMANDS)} "
              f"(commands: {', '.join(COMMANDS)}; with none, run.py searches)", file=sys.stderr)
        return 2
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help", "--version"):
        argv.insert(0, "search")  # the main command: `run.py --suite S --islands N`
    args = build_parser().parse_args(argv)
    try:
        return {"search": cmd_search, "check": cmd_check, "validate": cmd_validate,
                "list": cmd_list, "llm-batch": cmd_llm_batch, "report": cmd_report}[args.command](args)
    except (UsageError, SuiteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `run.py list --json | head`: the reader is gone, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 141


def _sigterm_as_ctrl_c():
    """`timeout`, `kill` and batch schedulers send SIGTERM: stop as on Ctrl-C (finish what is
    in flight, record it, export) instead of dying with nothing exported."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    _sigterm_as_ctrl_c()
    sys.exit(main())
