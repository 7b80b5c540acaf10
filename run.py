"""triton-evolve command line. Thin: parses the options (evolve/cli_options.py), turns them into
frozen configs with every option checked in one place (`search_configs`, `_eval_config`), and
hands those to the packages; nothing below run.py sees argparse."""
from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evolve.config import Configs, LLMConfig
    from fitness.engine.cluster import ClusterConfig
    from fitness.engine.evaluator import EvalConfig


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _cluster_config(args: argparse.Namespace, problems: list[str]) -> ClusterConfig | None:
    """--cluster and its options as a fitness.engine.cluster.ClusterConfig (None: local)."""
    where = args.cluster
    if where == "local":
        return None
    if where not in ("gpus", "slurm") and "://" not in where:
        problems.append(f"--cluster takes local, gpus, slurm or a scheduler address (tcp://HOST:PORT), not {where!r}")
    if args.cluster_attempts < 1 or args.cluster_jobs < 1 or args.cluster_job_cores < 1:
        problems.append("--cluster-attempts, --cluster-jobs and --cluster-job-cores must be at least 1")
    try:
        from fitness.engine.cluster import ClusterConfig
    except ImportError as e:
        problems.append(f"--cluster {where} needs Dask ({e.name} is missing): pip install -e '.[cluster]'")
        return None
    return ClusterConfig(where=where, attempts=args.cluster_attempts, jobs=args.cluster_jobs,
                         partition=args.cluster_partition, account=args.cluster_account,
                         walltime=args.cluster_walltime, job_cores=args.cluster_job_cores,
                         job_memory=args.cluster_job_memory)


def _eval_config(args: argparse.Namespace, problems: list[str]) -> EvalConfig:
    from fitness.engine.evaluator import EvalConfig

    seeds: tuple[int, ...] = (0, 1)
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        problems.append(f"--seeds takes integers separated by commas, not {args.seeds!r}")
    if args.workers < 1 or args.trials < 3 or args.timeout <= 0:
        problems.append("--workers must be >= 1, --trials >= 3 and --timeout > 0")
    from suites.user import looks_like_path, visible_paths

    return EvalConfig(seeds=seeds, workers=args.workers, device=args.device, timeout_s=args.timeout,
                      trials=args.trials, baseline=args.baseline, sandbox=not args.no_sandbox,
                      suite_path=args.suite_path, mem_limit_gb=args.mem_limit,
                      task_dirs=visible_paths(args.suite) if looks_like_path(args.suite) else ())


def _checked_eval_config(args: argparse.Namespace) -> EvalConfig:
    problems: list[str] = []
    config = _eval_config(args, problems)
    if problems:
        raise UsageError("; ".join(problems))
    return config


def make_evaluator(config: EvalConfig, cluster: ClusterConfig | None = None):
    """The evaluator the configs name (enter it: `with make_evaluator(...) as ev`)."""
    from fitness.engine.evaluator import Evaluator

    try:
        if cluster is not None:
            from fitness.engine.cluster import ClusterError, ClusterEvaluator
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


def cmd_check(args) -> int:
    from fitness.engine.static_gate import MAX_SOURCE_BYTES
    from suites.registry import did_you_mean

    tasks = _load(args)
    if args.task not in tasks:
        raise UsageError(f"unknown task {args.task!r}{did_you_mean(args.task, tasks)} in suite {args.suite!r} "
                         f"(known: {', '.join(sorted(tasks))})")
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
    with make_evaluator(_checked_eval_config(args)) as ev:
        verdict = ev.evaluate(tasks[args.task], source)
    print(json.dumps({"failed_at": verdict.failed_at(), **verdict.to_dict()}, indent=1))
    return 0


def _validation_path(args):
    from suites.validation import record_path

    return record_path(args.suite, args.validation)


def cmd_validate(args: argparse.Namespace) -> int:
    from evolve.commands import ValidateOptions, validate

    config = _checked_eval_config(args)
    options = ValidateOptions(suite=args.suite, record=_validation_path(args), as_json=args.json,
                              timed=not args.no_time, pending=args.pending, workers=args.workers, command=args.typed)
    return validate(_selected(args), options, lambda workers: make_evaluator(replace(config, workers=workers)))


def cmd_list(args: argparse.Namespace) -> int:
    from evolve.commands import list_tasks

    return list_tasks(_selected(args), args.suite, _validation_path(args), args.json)


def cmd_search(args: argparse.Namespace) -> int:
    from archives.archive import ArchiveError
    from evolve.runner import SearchError, run_search
    from operators.registry import OperatorError

    c = search_configs(args)
    try:
        return run_search(c.run, c.search, c.llm, lambda: make_evaluator(c.evaluation, c.cluster)).exit_code
    except (SearchError, ArchiveError, OperatorError) as e:
        raise UsageError(str(e)) from None


def search_configs(args: argparse.Namespace) -> Configs:
    """The search command's options as frozen configs (evolve/config.py), every one checked here:
    all problems in one message, before anything starts."""
    from evolve.config import Configs, RunConfig, SearchConfig
    from evolve.config_file import PER_COMMAND
    from evolve.llm_setup import temperatures

    problems: list[str] = []
    o = _resolved(args, problems)
    problems += _search_problems(o)
    name = _operators(o, problems)
    llm = _llm_config(o, problems) if name in ("llm", "both") else None
    evaluation, cluster = _eval_config(o, problems), _cluster_config(o, problems)
    if problems:
        raise UsageError("; ".join(problems))
    archive = Path(o.archive)
    options = {k: v for k, v in vars(o).items() if k not in (*PER_COMMAND, "command", "given", "explicit")}
    run = RunConfig(suite=o.suite, suite_path=o.suite_path, tasks=o.tasks, difficulty=o.difficulty,
                    category=o.category, validation=o.validation, archive=archive,
                    # beside the archive and named after it: two archives of a suite never share their exports
                    export=Path(o.export) if o.export else archive.with_name(archive.stem + "-best"),
                    fresh=o.fresh, extend=o.extend, retime=o.retime, time_limit=o.time_limit, aa_every=o.aa_every,
                    operators=name, operators_explicit=o.explicit, knob_rate=o.knob_rate, device=o.device,
                    model=o.model, baseline=o.baseline, seeds=o.seeds, options=options)
    search = SearchConfig(islands=o.islands, population=o.population, generations=o.generations,
                          migration_interval=o.migration_interval, seed=o.seed,
                          budget_evals=o.budget_evals, target_speedup=o.target_speedup,
                          patience=o.patience, roofline_stop=o.roofline_stop,
                          temperatures=temperatures(o.temperature, o.islands) if llm else (),
                          setting=o.setting)
    return Configs(run=run, search=search, evaluation=evaluation, cluster=cluster, llm=llm)


def _resolved(args: argparse.Namespace, problems: list[str]) -> argparse.Namespace:
    """The options this search runs with: the command line's over --config FILE's over those of
    the run stored in the archive (a resume) over the defaults. What a resume may not change,
    and what the file gets wrong, go into `problems`."""
    from archives.archive import ArchiveError, stored_run
    from evolve.cli_options import program, search_specs
    from evolve.config_file import layered, read_file, resume_conflicts
    from evolve.runner import conflict_message

    cli = {k: v for k, v in vars(args).items() if k in getattr(args, "given", ())}
    file = read_file(args.config, search_specs(), problems) if getattr(args, "config", None) else {}
    first = {"fresh": False, "extend": False, "retime": False, **vars(args), **file, **cli}
    from suites.user import suite_label

    archive = first["archive"] or f"runs/{suite_label(first['suite'])}.db"
    run = None
    try:
        run = None if first["fresh"] else stored_run(archive)
    except ArchiveError as e:
        problems.append(str(e))
    if args.command == "resume" and run is None and not problems:
        problems.append(f"{archive} holds no run to resume (start one with: {program()} --archive {archive} ...)")
    o = argparse.Namespace(**layered(first, cli, file, run.config if run else {}))
    o.archive, o.explicit = archive, "operators" in cli or "operators" in file
    if run is not None:
        conflicts = resume_conflicts(run.config, vars(o), o.extend)
        problems += [conflict_message(archive, run.id, conflicts)] if conflicts else []
    return o


def _operators(args: argparse.Namespace, problems: list[str]) -> str:
    from operators.registry import NAMES

    name = args.operators or ("llm" if args.model else "knobs")
    if name not in NAMES:
        problems.append(f"unknown operator set {name!r} (known: {', '.join(NAMES)})")
    elif name != "knobs" and not args.model:
        problems.append(f"--operators {name} needs a model: give --model NAME (and --base-url URL for a "
                        "server other than OpenAI's)")
    elif name == "knobs" and args.setting == "instruction":
        problems.append("--setting instruction needs an LLM to write the first kernels: give --model NAME "
                        "(--operators llm or both)")
    elif name == "both" and not 0 < args.knob_rate < 1:
        problems.append("--knob-rate must be between 0 and 1 (exclusive) for --operators both")
    return name


def _search_problems(args: argparse.Namespace) -> list[str]:
    checks = ((args.islands < 1, "--islands must be at least 1"),
              (args.population < 2, "--population must be at least 2"),
              (args.generations < 0, "--generations must be 0 or more"),
              (args.migration_interval < 1, "--migration-interval must be at least 1"),
              (args.budget_evals is not None and args.budget_evals < 1, "--budget-evals must be at least 1"),
              (args.time_limit is not None and args.time_limit <= 0, "--time-limit must be positive"),
              (args.max_debug < 1, "--max-debug must be at least 1"),
              (args.aa_every < 0, "--aa-every must be 0 (none) or more"),
              (args.patience is not None and args.patience < 1, "--patience must be at least 1"),
              (args.roofline_stop is not None and not 0 < args.roofline_stop <= 1,
               "--roofline-stop must be a share in (0, 1], e.g. 0.9"))
    return [message for bad, message in checks if bad]


def _llm_config(args: argparse.Namespace, problems: list[str]) -> LLMConfig:
    """The LLM operators' config; what is wrong with their options goes into `problems`."""
    from evolve.config import LLMConfig
    from evolve.llm_setup import parse_temperature
    from operators.llm_client import LLMConfig as ClientConfig
    from operators.llm_client import price_of

    key = os.environ.get("OPENAI_API_KEY") or None
    if not key and not args.llm_exchange:
        problems.append(f"--operators {args.operators or 'llm'} needs an API key in OPENAI_API_KEY (a server "
                        "that checks none, e.g. vLLM or Ollama, takes any value: OPENAI_API_KEY=EMPTY)")
    try:
        parse_temperature(args.temperature)
    except ValueError as e:
        problems.append(str(e))
    price = None
    if args.llm_price:
        try:
            price = parse_temperature(args.llm_price)
        except ValueError:
            problems.append(f"--llm-price takes two non-negative numbers separated by a comma, not {args.llm_price!r}")
    for flag, value, low in (("--llm-concurrency", args.llm_concurrency, 1), ("--max-tokens", args.max_tokens, 16),
                             ("--llm-retries", args.llm_retries, 0)):
        if value < low:
            problems.append(f"{flag} must be at least {low}")
    if args.llm_timeout <= 0:
        problems.append("--llm-timeout must be positive")
    if args.max_llm_calls is not None and args.max_llm_calls < 1:
        problems.append("--max-llm-calls must be at least 1")
    if args.max_cost is not None and args.max_cost <= 0:
        problems.append("--max-cost must be positive")
    if args.max_cost is not None and not price_of(args.model, price):
        problems.append(f"--max-cost needs the price of model {args.model!r}, which the built-in table lacks: "
                        "give --llm-price IN,OUT (USD per million prompt and completion tokens)")
    client = ClientConfig(model=args.model, base_url=args.base_url or os.environ.get("OPENAI_BASE_URL") or None,
                          api_key=key, concurrency=args.llm_concurrency, timeout_s=args.llm_timeout,
                          retries=args.llm_retries, max_tokens=args.max_tokens, max_cost=args.max_cost,
                          max_calls=args.max_llm_calls, price=price)
    return LLMConfig(client=client, exchange=args.llm_exchange, temperature=args.temperature,
                     max_debug=args.max_debug)


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


def cmd_new_task(args: argparse.Namespace) -> int:
    from evolve.cli_options import program
    from suites.user import write_template

    path = write_template(args.name, args.out)
    print(f"wrote {path}: edit it, then `{program()} validate --suite {path}`")
    return 0


def cmd_report(args) -> int:
    from archives.report import cmd_report as report

    if args.watch is not None and not 0 < args.watch <= 86400:  # nan fails this too
        raise UsageError(f"--watch takes seconds above 0 and at most 86400, not {args.watch:g}")
    if args.watch is not None and args.json:
        raise UsageError("--watch and --json do not go together (--watch rewrites report/report.json instead)")
    out = args.out or str(Path("report") / Path(args.archive).stem)
    return report(args.archive, out, args.run, args.invalid, args.json, args.watch)


def cmd_ui(args) -> int:
    from archives.ui import cmd_ui as ui

    return ui(args.archive, args.host, args.port, args.metadata_out)


def main(argv: list[str] | None = None) -> int:
    """The command line (also the `triton-evolve` console command): its exit status."""
    if argv is None:  # as a program: the process's signals are ours
        _sigterm_as_ctrl_c()
    argv = list(sys.argv[1:] if argv is None else argv)
    from evolve.cli_options import COMMANDS, parse, program
    from suites.registry import SuiteError, did_you_mean
    from suites.validation import RecordError

    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}{did_you_mean(argv[0], COMMANDS)} "
              f"(commands: {', '.join(COMMANDS)}; with none, {program()} searches)", file=sys.stderr)
        return 2
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help", "--version"):
        argv.insert(0, "search")  # the main command: `run.py --suite S --islands N`
    args = parse(argv)
    args.typed = f"{program()} {shlex.join(argv)}"  # the command as typed: what our messages suggest repeats it
    _log_to_stderr()
    _own_suite_by_path(args)
    try:
        return {"search": cmd_search, "resume": cmd_search, "check": cmd_check, "validate": cmd_validate,
                "list": cmd_list, "llm-batch": cmd_llm_batch, "report": cmd_report, "ui": cmd_ui,
                "new-task": cmd_new_task}[args.command](args)
    except (UsageError, SuiteError, RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `run.py list --json | head`: the reader is gone, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 141


def _own_suite_by_path(args: argparse.Namespace) -> None:
    """--suite PATH (a task file or folder) as an absolute path: the archive keeps it, so a run
    resumes, exports and reports from any folder, and the workers load the same files."""
    from suites.user import looks_like_path

    if getattr(args, "suite", None) and looks_like_path(args.suite):
        args.suite = os.path.abspath(args.suite)


def _log_to_stderr() -> None:
    """The engine's diagnostics (worker restarts, LLM retries, timing failures, operators that
    ran dry) go to `logging`; TRITON_EVOLVE_LOG=info (or debug) shows them. The default shows
    warnings only, so a command's own output stays plain."""
    name = os.environ.get("TRITON_EVOLVE_LOG", "warning").upper()
    level = logging.getLevelName(name)
    logging.basicConfig(level=level if isinstance(level, int) else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")


def _sigterm_as_ctrl_c():
    """`timeout`, `kill` and batch schedulers send SIGTERM: stop as on Ctrl-C (finish what is
    in flight, record it, export) instead of dying with nothing exported."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    sys.exit(main())
