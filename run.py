"""triton-evolve command line. Thin: parses arguments and hands off to the packages."""
from __future__ import annotations

import argparse
import json
import os
import sys

COMMANDS = ("search", "check", "validate", "list", "report")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _common(p: argparse.ArgumentParser):
    p.add_argument("--suite", default="builtin", help="suite name (builtin)")
    p.add_argument("--suite-path", default=None, help="folder holding the suite's data")


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


def _search_opts(p: argparse.ArgumentParser):
    p.add_argument("--islands", type=int, default=4, help="islands per task (default 4)")
    p.add_argument("--population", type=int, default=8, help="individuals per island (default 8)")
    p.add_argument("--generations", type=int, default=10, help="generations per task (default 10)")
    p.add_argument("--migration-interval", type=int, default=3,
                   help="generations between migrations along the ring (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--archive", default=None, help="SQLite archive (default runs/<suite>.db)")
    p.add_argument("--export", default=None, metavar="DIR", help="export folder (default runs/<suite>-best)")
    p.add_argument("--operators", default=None, help="knobs, llm or both (default: llm when one is "
                   "configured, else knobs)")
    p.add_argument("--budget-evals", type=int, default=None, help="stop a task after this many evaluations")
    p.add_argument("--time-limit", type=float, default=None, help="stop the run after this many seconds")
    p.add_argument("--target-speedup", type=float, default=None, help="stop a task once this speedup is reached")
    p.add_argument("--fresh", action="store_true", help="start a new archive even if one exists")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run.py", description="Evolve faster Triton kernels.")
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
    p = sub.add_parser("list", help="list the tasks of a suite")
    _common(p)
    _filters(p)
    p.add_argument("--json", action="store_true")
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
                        suite_path=args.suite_path)
    try:
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


def cmd_validate(args) -> int:
    tasks = _selected(args)
    names = list(tasks)
    with _evaluator(args) as ev:
        verdicts = ev.evaluate_many([(tasks[n], tasks[n].start_source) for n in names])
    if args.json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=1))
    else:
        print(f"{'task':24} {'stage':8} {'held-out':8} {'speedup':>8}  note")
        for v in verdicts:
            sp = f"{v.speedup:.3f}" if v.speedup is not None else "-"
            note = "" if v.passed else v.reason.splitlines()[0][:100] if v.reason else ""
            print(f"{v.task:24} {v.stage:8} {'ok' if v.heldout_correct else 'FAIL':8} {sp:>8}  {note}")
        ok = sum(v.passed for v in verdicts)
        timed = [v.speedup for v in verdicts if v.speedup is not None]
        line = f"{ok}/{len(verdicts)} starting kernels correct (tuning and held-out shapes)"
        if timed:
            from fitness.verdict import geomean

            line += f"; geometric-mean speedup vs {verdicts[0].baseline}: {geomean(timed):.3f} over {len(timed)} timed"
        else:
            line += "; " + (verdicts[0].timing if verdicts and verdicts[0].timing else "none timed")
        print(line)
        print(f"device: {verdicts[0].device if verdicts else '?'}; sandbox: {verdicts[0].sandbox if verdicts else '?'}")
    return 0


def cmd_list(args) -> int:
    tasks = _selected(args)
    if args.json:
        print(json.dumps([{"name": t.name, "category": t.category, "entry": t.entry, "dtypes": list(t.dtypes),
                           "difficulty": t.difficulty, "instruction": t.instruction,
                           "start_source": t.start_source} for t in tasks.values()], indent=1))
        return 0
    print(f"{'task':24} {'category':15} {'entry':24} dtypes")
    for t in tasks.values():
        print(f"{t.name:24} {t.category:15} {t.entry:24} {','.join(t.dtypes)}")
    print(f"{len(tasks)} tasks in suite {args.suite!r}")
    return 0


def cmd_search(args) -> int:
    from archives.archive import ArchiveError
    from evolve.runner import SearchError, run_search
    from operators.registry import OperatorError

    try:
        return run_search(args, lambda: _evaluator(args))
    except (SearchError, ArchiveError, OperatorError) as e:
        raise UsageError(str(e)) from None


def cmd_report(args) -> int:
    from archives.report import cmd_report as report

    return report(args)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv.insert(0, "search")  # the main command: `run.py --suite S --islands N`
    args = build_parser().parse_args(argv)
    from suites.registry import SuiteError

    try:
        return {"search": cmd_search, "check": cmd_check, "validate": cmd_validate,
                "list": cmd_list, "report": cmd_report}[args.command](args)
    except (UsageError, SuiteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
