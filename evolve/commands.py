"""The suite commands other than search: `validate` (every task's reference or starting kernel,
recorded as it finishes) and `list`. run.py checks their options and hands them typed values."""
from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping, Protocol

from fitness.common.flags import Flag
from fitness.engine.verdict import Verdict, geomean
from suites import validation
from suites.task import Task

if TYPE_CHECKING:
    from fitness.engine.script_eval import ScriptReference


class Validator(Protocol):
    """What validate needs of an evaluator (fitness.engine.evaluator.Evaluator, or a cluster's)."""

    def validate_iter(self, tasks: list[Task], timed: bool = True) -> Iterator[Verdict]: ...

    def reference_status(self, task: Task) -> str: ...

    @property
    def script_refs(self) -> Any: ...


MakeValidator = Callable[[int], ContextManager[Validator]]  # workers -> an evaluator to enter


@dataclass(frozen=True)
class ValidateOptions:
    suite: str
    record: Path  # validate's record of the tasks (suites.validation)
    as_json: bool = False  # the verdicts as JSON on stdout instead of the table
    timed: bool = True  # time the references (False: only check that they run)
    pending: bool = False  # only the tasks the record lacks
    workers: int = 1
    command: str = "validate"  # the command line as the user typed it, for the line an interrupt ends with


def warn_problems(tasks: Mapping[str, Task]) -> None:
    for p in getattr(tasks, "problems", []):
        print(f"warning: {p}", file=sys.stderr)


def validate(tasks: Mapping[str, Task], options: ValidateOptions, make: MakeValidator) -> int:
    """Evaluates every task's reference, printing and recording each as it finishes; 130 when
    interrupted (what finished stays recorded: `--pending` goes on from there)."""
    validation.check_writable(options.record)  # before the work, not after the first task's
    warn_problems(tasks)
    if options.pending:  # what an earlier, cut-short validate did not get to
        done = validation.read(options.record).get("tasks", {})
        tasks = {n: t for n, t in tasks.items() if n not in done}
        print(f"{len(done)} task(s) already in {options.record}; validating the {len(tasks)} others", flush=True)
    try:  # the header too: a Ctrl-C as it printed ended as `error: interrupted`, with no way on
        if not options.as_json:
            print(f"{'task':40} {'status':14} {'held-out':8} {'speedup':>8}  note", flush=True)
        verdicts, entries = _validate_pass(tasks, options, make(options.workers))
    except KeyboardInterrupt:
        print(interrupted_line(options), file=sys.stderr)
        return 130
    # a reference that ran out of GPU memory or faulted while other workers shared the GPU gets
    # a second chance with the GPU to itself: that failure may not be its own
    retry = [n for n, e in entries.items() if e["status"] == validation.INVALID
             and validation.shared_gpu_failure(e["reason"])]
    if retry and options.workers > 1:
        print(f"retrying {len(retry)} task(s) alone, with the GPU to themselves: {', '.join(sorted(retry))}",
              flush=True)
        again, more = _validate_pass({n: tasks[n] for n in retry}, options, make(1))
        verdicts = [v for v in verdicts if v.task not in more] + again
        entries.update(more)
    if options.as_json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=1))
        return _unloaded(tasks)
    _validate_summary(tasks, verdicts, options.record if entries else None)
    return _unloaded(tasks)


def interrupted_line(options: ValidateOptions) -> str:
    """How to go on after Ctrl-C, as a command one can paste (it said `validate --pending`, and named
    a record it never wrote when no task had finished)."""
    if not options.record.exists():
        return f"interrupted before any task finished: nothing recorded; start again with `{options.command}`"
    done = len(validation.read(options.record).get("tasks", {}))
    again = options.command if options.pending else f"{options.command} --pending"
    return f"interrupted: {done} task(s) recorded in {options.record}; go on with `{again}`"


def _unloaded(tasks: Mapping[str, Task]) -> int:
    """2 when a task file could not be loaded (the others were validated): each said again, in
    one line, after the table it is missing from."""
    problems = getattr(tasks, "problems", [])
    for p in problems:
        print(f"not validated: {p}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} task file(s) could not be loaded: fix them and validate again", file=sys.stderr)
    return 2 if problems else 0


def _validate_pass(tasks: Mapping[str, Task], options: ValidateOptions,
                   evaluator: ContextManager[Validator]) -> tuple[list[Verdict], dict[str, dict]]:
    verdicts: list[Verdict] = []
    entries: dict[str, dict] = {}
    # a start the static gate refused never reached a device: recorded with the first device
    # another verdict names (it was left out of the record and its counts: "0 of 1 tasks valid")
    unplaced: list[str] = []
    with evaluator as ev:
        for v in ev.validate_iter(list(tasks.values()), timed=options.timed):
            task = tasks[v.task]
            if "user" in task.tags:  # the task file's author can allow torch work: say how
                v.reason = validation.naming_torch_ops(v.reason)
            ref = ev.script_refs.get(task) if task.script is not None else None
            weak = bool(ref and not ref.error and ref.weak)
            verdicts.append(v)
            if v.device or v.failed_at() == "static gate":  # else the engine's failure (a closed pool)
                entries[v.task] = validation.entry(v, weak, guard_marks(ref))
                unplaced.append(v.task)
            if device_of(verdicts) and unplaced:
                validation.merge(options.record, options.suite, device_of(verdicts), {n: entries[n] for n in unplaced})
                unplaced = []
            if not options.as_json:
                sp = f"{v.speedup:.3f}" if v.speedup is not None else "-"
                status = "correct" if v.passed else "not replayable" if Flag.NOT_REPLAYABLE in v.flags else \
                    "invalid-here" if Flag.INVALID_HERE in v.flags and task.script is not None else \
                    validation.stage_words(v.stage, v.reason)
                dropped = ref.dropped() if ref else ""
                note = ("weak-test " if weak else "") + (f"{dropped}; " if dropped and not v.passed else dropped) + \
                    ("" if v.passed else validation.brief(v.reason, 110) if v.reason else "")
                print(f"{v.task:40} {status:14} {'ok' if v.heldout_correct else 'FAIL':8} {sp:>8}  {note}", flush=True)
    if unplaced:  # every start refused before it ran: the record's device stays as it was
        validation.merge(options.record, options.suite, "", {n: entries[n] for n in unplaced})
    return verdicts, entries


def device_of(verdicts: list[Verdict]) -> str:
    """The device the validated code ran on ('' while none ran: a static-gate refusal names none)."""
    return next((v.device for v in verdicts if v.device), "")


def guard_marks(ref: ScriptReference | None) -> dict:
    """What the guard-band check (fitness.clean.guard_bands) left on a script task's reference, for
    validate's record: the benchmark inputs dropped ({index: reason}) and any it could not check."""
    if ref is None:
        return {}
    marks: dict[str, Any] = {}
    if ref.unstable:
        marks["unstable_perf"] = {str(i): f.reason for i, f in sorted(ref.unstable.items())}
    if ref.unchecked:
        marks["guard_unchecked"] = ref.unchecked
    return marks


def _validate_summary(tasks: Mapping[str, Task], verdicts: list[Verdict], record: Path | None) -> None:
    ok = sum(v.passed for v in verdicts)
    timed = [v.speedup for v in verdicts if v.speedup is not None]
    what = "references" if any(t.script is not None for t in tasks.values()) else "starting kernels"
    line = f"{ok}/{len(verdicts)} {what} correct (tuning and held-out cases)"
    if timed:
        line += f"; geometric-mean speedup vs {verdicts[0].baseline}: {geomean(timed):.3f} over {len(timed)} timed"
    else:
        line += "; " + (verdicts[0].timing if verdicts and verdicts[0].timing else "none timed")
    print(line)
    ran = next((v for v in verdicts if v.device), verdicts[0] if verdicts else None)
    print(f"device: {ran.device or 'none (no code ran)' if ran else '?'}; "
          f"sandbox: {ran.sandbox if ran else '?'}")
    if record is not None:
        kept = validation.read(record)
        for text in validation.summary(kept["tasks"], starting=what == "starting kernels"):
            print(text)
        print(f"recorded in {record} ({len(kept['tasks'])} task(s) so far)")


def list_tasks(tasks: Mapping[str, Task], suite: str, record: Path, as_json: bool) -> int:
    """The tasks of a suite with their marks from validate's record (a table, or JSON)."""
    warn_problems(tasks)
    marks = validation.read(record).get("tasks", {})

    def tags(name: str) -> str:
        e = marks.get(name, {})
        return ",".join(t for t, on in (("invalid-here", e.get("status") == validation.INVALID),
                                        ("not-replayable", e.get("status") == validation.NOT_REPLAYABLE),
                                        ("weak-test", e.get("weak_test"))) if on)
    if as_json:
        print(json.dumps([{"name": t.name, "category": t.category, "entry": t.entry, "dtypes": list(t.dtypes),
                           "difficulty": t.difficulty, "marks": tags(t.name), "instruction": t.instruction,
                           "start_source": t.start_source} for t in tasks.values()], indent=1))
        return 0
    print(f"{'task':40} {'category':14} {'diff':4} {'entry':28} marks")
    for t in tasks.values():
        print(f"{t.name:40} {t.category:14} {t.difficulty if t.difficulty is not None else '-'!s:4} "
              f"{t.entry:28} {tags(t.name)}")
    print(f"{len(tasks)} tasks in suite {suite!r}")
    diff = Counter(t.difficulty for t in tasks.values())
    print("by difficulty: " + ", ".join(f"{d if d is not None else '-'}: {n}"
                                         for d, n in sorted(diff.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))))
    cats = Counter(t.category for t in tasks.values())
    print("by category: " + ", ".join(f"{c}: {n}" for c, n in sorted(cats.items())))
    if not marks:
        print(f"(no validation record at {record}: run validate to mark invalid-here and weak-test tasks)")
    return 0
