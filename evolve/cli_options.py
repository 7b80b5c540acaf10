"""The command line's options: every command's flags, defaults and help, in one place. run.py
turns what they parse into checked, frozen configs (`search_configs`) and runs the command."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from evolve.config_file import OptionSpec

COMMANDS = ("search", "resume", "check", "validate", "list", "llm-batch", "report", "ui", "new-task")

# the default record and archive of a task file or folder (suites.user.suite_label): its name and
# a digest of its absolute path, so two folders named `tasks` keep two of each
_OWN_SUITE_NAME = "a task file or folder NAME: runs/NAME-<8 hex digits of its absolute path>"


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="builtin", help="builtin, tritonbench, rocm or kernelbench; or your own: "
                   "a task file or a folder of them (see `new-task`)")
    p.add_argument("--suite-path", default=None, help="folder holding the suite's data (else $TRITON_EVOLVE_DATA, "
                   "else a per-user cache filled by download)")
    p.add_argument("--validation", default=None, metavar="FILE",
                   help="validate's record of the tasks invalid here (default runs/<suite>-validation.json; "
                   f"{_OWN_SUITE_NAME}-validation.json)")


def _eval_opts(p: argparse.ArgumentParser) -> None:
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


def _search_opts(p: argparse.ArgumentParser, resume: bool = False) -> None:
    p.add_argument("--config", default=None, metavar="FILE",
                   help="a TOML file of these options (keys are option names: islands = 10); "
                   "flags given here override it")
    p.add_argument("--extend", action="store_true",
                   help="on resume, let --generations and --tasks (--difficulty, --category) grow")
    p.add_argument("--retime", action="store_true",
                   help="on resume on another device model (an archive timed on an H100, resumed on an H200): "
                   "evaluate the kernels the run keeps again here instead of refusing; the other device's "
                   "evaluations are kept aside (table retired_evaluations)")
    p.add_argument("--islands", type=int, default=4, help="islands per task (default 4)")
    p.add_argument("--population", type=int, default=8, help="individuals per island (default 8)")
    p.add_argument("--generations", type=int, default=10, help="generations per task (default 10)")
    p.add_argument("--migration-interval", type=int, default=3,
                   help="generations between migrations along the ring (default 3)")
    p.add_argument("--seed", type=int, default=0,
                   help="the search's random seed: the same seed and options give the same run (default 0)")
    if resume:
        p.add_argument("archive", help="the SQLite archive whose latest run goes on, with its stored settings")
    else:
        p.add_argument("--archive", default=None,
                       help=f"SQLite archive (default runs/<suite>.db; {_OWN_SUITE_NAME}.db); "
                       "one that holds a run resumes it, with its stored settings")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="export folder (default: beside the archive, named after it: runs/x.db -> runs/x-best)")
    p.add_argument("--operators", default=None, help="knobs, llm or both (default: llm when one is "
                   "configured, else knobs)")
    p.add_argument("--setting", choices=("optimize", "instruction"), default="optimize",
                   help="optimize: improve the task's starting Triton kernel (default); instruction (GEAK's): "
                   "the LLM writes the first kernels from the instruction and interface alone, never seeing "
                   "the reference's or starting kernel's code, nor any task of the searched suite")
    p.add_argument("--budget-evals", type=int, default=None, help="stop a task after this many evaluations")
    p.add_argument("--time-limit", type=float, default=None, help="stop the run after this many seconds")
    p.add_argument("--aa-every", type=int, default=25, metavar="N",
                   help="GPU: after every N evaluations, time a starting kernel against itself (an A/A "
                   "sentinel: the timing noise under the search's load); 0: none (default 25)")
    p.add_argument("--target-speedup", type=float, default=None, help="stop a task once this speedup is reached")
    p.add_argument("--patience", type=int, default=None, metavar="N",
                   help="stop a task after N generations without a better best speedup (default: off)")
    p.add_argument("--roofline-stop", type=float, default=None, metavar="SHARE",
                   help="stop a task once its best kernel reaches SHARE (0-1, e.g. 0.9) of the roofline on "
                   "every timed shape; needs the task's cost model and a GPU (default: off)")
    if not resume:
        p.add_argument("--fresh", action="store_true", help="start a new run even if the archive holds one")
    _cluster_opts(p)
    _llm_opts(p)


def _llm_opts(p: argparse.ArgumentParser) -> None:
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


def _cluster_opts(p: argparse.ArgumentParser) -> None:
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


def parse(argv: list[str]) -> argparse.Namespace:
    """The options, with `given`: the names of those on the command line (a second parse, with
    no defaults, tells them from defaults even where a flag repeats its default)."""
    args = build_parser().parse_args(argv)
    bare = build_parser()
    for action in _actions(bare):
        action.default = argparse.SUPPRESS
    args.given = frozenset(vars(bare.parse_args(argv))) - {"command"}
    return args


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every option of every subcommand (argparse keeps them in private attributes only)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for p in sub.choices.values() for a in p._actions]


def search_specs() -> dict[str, OptionSpec]:
    """The search options a --config file may set, and their defaults, by dest."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    specs = {}
    for a in sub.choices["search"]._actions:
        if a.dest in ("help", "config") or not a.option_strings:
            continue
        kind = bool if isinstance(a, argparse._StoreTrueAction) else (a.type or str)
        specs[a.dest] = OptionSpec(a.dest, kind, tuple(a.choices) if a.choices else None)
    return specs


class Parser(argparse.ArgumentParser):
    """argparse, with a did-you-mean for a misspelt option (`--islnds`)."""

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """An option the command does not take is the command's error: its usage and its own
        options' suggestions (argparse leaves it to the top level, which showed the commands' list)."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            sub = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
            command = getattr(parsed, "command", None)
            owner = sub.choices[command] if sub is not None and command in sub.choices else self
            owner.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        from suites.registry import did_you_mean

        if message.startswith("unrecognized arguments: "):
            known = {o for a in self._actions for o in a.option_strings} | \
                {o for a in self._actions if isinstance(a, argparse._SubParsersAction)
                 for p in a.choices.values() for b in p._actions for o in b.option_strings}
            hints = [w.split("=")[0] + did_you_mean(w.split("=")[0], known) for w in message.split(": ", 1)[1].split()
                     if w.startswith("--") and did_you_mean(w.split("=")[0], known)]
            if hints:
                message += "; " + ", ".join(hints)
        super().error(message)


def program() -> str:
    """How the user started us, for the commands our messages suggest."""
    return "triton-evolve" if Path(sys.argv[0]).name == "triton-evolve" else "python run.py"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=program().removeprefix("python "), description="Evolve faster Triton kernels.")
    parser.add_argument("--version", action="version", version=f"triton-evolve {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("search", help="the evolutionary search (the default command)")
    common(p)
    _eval_opts(p)
    _filters(p)
    _search_opts(p)
    p = sub.add_parser("resume", help="go on with an archive's latest run, with the settings stored in it")
    common(p)
    _eval_opts(p)
    _filters(p)
    _search_opts(p, resume=True)
    p = sub.add_parser("check", help="evaluate one candidate kernel file; prints a JSON verdict")
    common(p)
    _eval_opts(p)
    p.add_argument("--task", required=True, help="the task the kernel is a candidate for")
    p.add_argument("kernel", help="path to the candidate's Python file")
    p = sub.add_parser("validate", help="evaluate every task's starting kernel")
    common(p)
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
    common(p)
    _filters(p)
    p.add_argument("--json", action="store_true", help="print the tasks as JSON, starting kernels included")
    _archive_commands(sub)
    p = sub.add_parser("new-task", help="write a commented template task file NAME.py for your own kernel")
    p.add_argument("name", help="the task's name (a Python identifier): also its entry function's")
    p.add_argument("--out", default=".", metavar="DIR", help="folder to write NAME.py in (default: this one)")
    return parser


def _archive_commands(sub: argparse._SubParsersAction) -> None:
    """The commands that read an archive: report and ui."""
    p = sub.add_parser("report", help="metrics, tables and plots of an archive (finished or still running)")
    p.add_argument("--archive", required=True, help="the SQLite archive of a search (read-only)")
    p.add_argument("--out", default=None, help="folder for index.html, summary.md, plots (default report/ARCHIVE, "
                   "named after the archive's file, so two archives' reports do not overwrite each other)")
    p.add_argument("--json", action="store_true", help="also print the report as JSON on stdout")
    p.add_argument("--run", type=int, default=None, help="run id in the archive (default: the latest)")
    p.add_argument("--invalid", default=None, metavar="FILE",
                   help="JSON of tasks invalid on this hardware (names, or `validate --json` output)")
    p.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                   help="rewrite the report every SECONDS while the run is live; stops when the run does, or on Ctrl-C")
    p = sub.add_parser("ui", help="browse an archive in Datasette (the ui extra), read-only, with canned queries")
    p.add_argument("--archive", required=True, help="the SQLite archive of a search (opened read-only)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8001, help="port (default 8001)")
    p.add_argument("--metadata-out", default=None, metavar="FILE",
                   help="write Datasette's metadata JSON to FILE and print the datasette command, instead of serving")


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", default=None, help="comma-separated task names")
    p.add_argument("--difficulty", default=None, help="comma-separated difficulty levels, e.g. 3,4")
    p.add_argument("--category", default=None, help="comma-separated categories")


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton-evolve")
    except PackageNotFoundError:  # a checkout that was never installed
        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]
