"""What `validate` learned about a suite on this machine: which tasks' references run here
(`valid`) and which do not (`invalid-here`, with the reason), and whose tests are weak.

Kept as JSON next to the archives (runs/<suite>-validation.json by default) and merged over
several `validate` calls, so a suite can be validated in parts. `list` shows the marks; `search`
leaves invalid-here tasks out and says so; reports list them instead of counting them.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from pathlib import Path

VALID, INVALID = "valid", "invalid-here"
# the task's reference runs, and the replay cannot model its kernels' call: the engine's limit (the
# verdict's flag of the same name), kept apart from tasks whose reference fails here
NOT_REPLAYABLE = "not-replayable"
UNUSABLE = (INVALID, NOT_REPLAYABLE)  # a search leaves these tasks out


def record_path(suite: str, given: str | None = None) -> Path:
    """--validation FILE, else runs/<suite>-validation.json."""
    from suites.user import suite_label  # a task file or folder: named after it

    return Path(given) if given else Path("runs") / f"{suite_label(suite)}-validation.json"


def read(path: Path) -> dict:
    """{} when there is no record; a damaged one is the user's to fix, said in one line."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
            raise ValueError("not a validation record")
        return data
    except (OSError, ValueError) as e:
        from suites.registry import SuiteError

        raise SuiteError(f"{path}: unreadable validation record ({e}); delete it and run validate again") from None


def entry(verdict, weak: bool, marks: dict | None = None) -> dict:
    """The record's entry for one task; `marks`: more it keeps (a script task's benchmark inputs
    dropped by the guard-band check, fitness.clean.guard_bands), only when there are any."""
    invalid = "invalid-here" in verdict.flags or not verdict.passed
    status = VALID if not invalid else NOT_REPLAYABLE if NOT_REPLAYABLE in verdict.flags else INVALID
    whole = {"reason_whole": verdict.reason} if invalid and short_reason(verdict.reason) != verdict.reason else {}
    return {"status": status, "reason": "" if not invalid else short_reason(verdict.reason), **whole,
            "weak_test": weak, "stage": verdict.stage, "speedup": verdict.speedup, **(marks or {})}


def merge(path: Path, suite: str, device: str, entries: dict[str, dict]) -> dict:
    """`device` '': entries that ran on none (a static-gate refusal), kept with the record's."""
    record = read(path)
    if device and record.get("device") not in (None, "", device):
        record = {}  # another machine's findings say nothing about this one
    record.update(suite=suite, device=device or record.get("device", ""), updated=time.strftime("%Y-%m-%d %H:%M:%S"))
    record.setdefault("tasks", {}).update(entries)
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError as e:
        raise RecordError(f"cannot write the validation record {path} ({e.strerror or e}): run validate from a "
                          "folder you can write, or give --validation FILE somewhere writable") from None
    return record


def check_writable(path: Path) -> None:
    """Before any work: the record can be written where it is to go (RecordError if not)."""
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.touch()
        tmp.unlink()
    except OSError as e:
        raise RecordError(f"cannot write the validation record {path} ({e.strerror or e}): run validate from a "
                          "folder you can write, or give --validation FILE somewhere writable") from None


class RecordError(OSError):
    """The record could not be written: the message says where and what to do instead."""


def invalid_tasks(record: dict) -> dict[str, str]:
    return {n: e.get("reason", "") for n, e in record.get("tasks", {}).items() if e.get("status") in UNUSABLE}


def short_reason(reason: str) -> str:
    """The line of an error that says what went wrong. For a trace (perhaps trimmed at its
    start): the first line's lead-in, the last exception line, and a ptxas 'fatal' line if any."""
    lines = [ln.strip() for ln in reason.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    head = lines[0]
    if len(lines) > 1:
        raised = [ln for ln in lines[1:] if _EXCEPTION.match(ln)]
        fatal = [ln for ln in lines if "fatal" in ln.lower()]
        last = raised[-1] if raised else lines[-1]
        head = f"{lead_in(head)}: {last}" + (f" [{fatal[-1]}]" if fatal and fatal[-1] != last else "") \
            + _kernel_line(lines)
    # it was cut at 300 characters, mid-word: the H100 record's longest, an A/A timing's why, is 380
    # (its end says what to do); a bound stays for an exception that prints a whole tensor
    return head if len(head) <= MAX_REASON else _words(head, MAX_REASON - 3) + "..."


MAX_REASON = 1000


def lead_in(line: str) -> str:
    """A reason's line up to its first colon outside brackets: "tuning case {'N': 1024} float32"
    of "tuning case {'N': 1024} float32: Traceback ..." (its first colon is the shape's own)."""
    depth = 0
    for i, ch in enumerate(line):
        depth += (ch in "([{") - (ch in ")]}")
        if ch == ":" and depth == 0:
            return line[:i]
    return line


def _kernel_line(lines: list[str]) -> str:
    """Where in the kernel's own source a trace last was, as `check`'s whole trace shows it:
    " (line 18 of the kernel, in my_op)"; '' when the trace never entered it."""
    frames = [m for m in map(_KERNEL_FRAME.search, lines) if m]
    return f" (line {frames[-1].group(1)} of the kernel, in {frames[-1].group(2)})" if frames else ""


def brief(reason: str, width: int = 160) -> str:
    """`short_reason` for one line of a table: at most `width` characters, cut in its lead-in
    rather than at its end, so the exception that says what went wrong still shows; a wrong
    result says what was wrong first and on which case after (not cut inside the shape)."""
    text = short_reason(reason)
    case = _WRONG_ON.match(text)
    if case:  # details spared in turn: the worst element, the tolerance's figures
        where, problem = case.group(1).replace(" shape ", " "), case.group(2)
        for cut in ("", r"; worst at .*$", r" \(atol [^)]*\)"):
            problem = re.sub(cut, "", problem) if cut else problem
            text = f"{problem} [{where}]"
            if len(text) <= width:
                return text
        return text[:width - 3] + "..."
    if len(text) <= width:
        return text
    head = lead_in(text)
    tail = text[len(head) + 2:]
    if head == text or len(tail) > width - 20:  # the exception alone is long: its start names it
        return (tail if head != text else text)[:width - 3] + "..."
    return _words(head, width - len(tail) - 5) + "...: " + tail


def _words(text: str, width: int) -> str:
    """The words of `text` that fit in `width` characters, a bracketed shape one word (a table's
    note was cut inside it: "tuning case {'N': RuntimeError: boom")."""
    out = ""
    for word in _WORD.findall(text):
        if len(out) + len(word) + bool(out) > width:
            break
        out += (" " if out else "") + word
    return out


_WRONG_ON = re.compile(r"^wrong result on (.*?) \(seed \d+\): (.*)$")
_WORD = re.compile(r"(?:\{[^}]*\}|\([^)]*\)|\[[^\]]*\]|\S)+")  # a bracket left open: a character
# a frame of the module a child imports the kernel's source as (fitness.process.child.module_name)
_KERNEL_FRAME = re.compile(r'File "[^"]*/[a-z]+_[0-9a-f]{16}\.py", line (\d+), in (\S+)')
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")
_SHARED_GPU = ("cuda out of memory", "outofmemoryerror", "illegal memory access", "device-side assert",
               "torch_use_cuda_dsa", "unspecified launch failure")


def shared_gpu_failure(reason: str) -> bool:
    """A failure that another process on the same GPU can cause (its memory, a broken context),
    so worth a retry with the GPU to itself."""
    low = reason.lower()
    if "outside its inputs" in low:  # the guard-band check's finding: the suite's own kernel, run alone
        return False
    return any(k in low for k in _SHARED_GPU)


def stage_words(stage: str, reason: str) -> str:
    """What went wrong, in the user's words rather than the verdict's stage name (the classes
    of archives.ui's FAILURE_CLASS)."""
    low = reason.lower()
    if reason.startswith("the task's own code raised"):
        return "task error"
    if "timed out" in low or "deadline" in low:
        return "timed out"
    if "out of memory" in low:
        return "out of memory"
    if "not replayable: " in reason:
        return "not replayable"
    if TORCH_WORK in reason:  # a refusal, not a crash: the kernel ran and did its work in torch
        return "torch work"
    if reason.startswith("replay:"):
        return "replay check"
    return {"none": "refused", "parse": "import error", "compile": "crashed", "call": "wrong result",
            "correct": "wrong held-out"}.get(stage, stage)


TORCH_WORK = "torch did work outside Triton kernels"  # the refusal's words (fitness.process.child, .engine.replay)


def naming_torch_ops(reason: str) -> str:
    """A user task's refusal for torch work, naming the task file's setting that allows that work
    (the note said only `crashed`, and neither it nor the record said how to allow it)."""
    if TORCH_WORK not in reason or "TORCH_OPS" in reason:
        return reason
    return reason.replace(TORCH_WORK, f'{TORCH_WORK} (TORCH_OPS = "allowed" in the task file allows it)', 1)


def reason_class(reason: str, starting: bool = False) -> str:
    """A coarse bucket for summaries (ptxas, timeout, import, wrong result, ...); `starting`: the
    code validated is a user's starting kernel, not a suite's reference, so a wrong result is its."""
    low = reason.lower()
    if reason.startswith("the task's own code raised"):
        return "the task's own code raised (its reference or make_inputs)"
    # the timed replay's check of a kernel the correctness stage passed: the engine's timing, not the
    # code's (H100: two suite references the timing got wrong were counted as "not reproducible")
    if reason.startswith("timing: ") and "wrong result" in low:
        return "timing: the timed replay gave a wrong result (the engine's side)"
    if starting and reason.startswith(("wrong result on ", "replay: the recorded kernels")):
        return "starting kernel gives a wrong result"  # its own outputs; a reference's faults stay the reference's
    for key, label in ((TORCH_WORK.lower(), "torch work outside the Triton kernels"),
                       ("static gate: ", "refused by the static gate"),
                       ("reads memory outside its inputs", "reference reads memory outside its inputs"),
                       ("writes outside its inputs", "reference writes outside its inputs"),
                       ("is not reproducible", "reference not reproducible"),
                       ("unresolved extern", "ptxas: unresolved extern function (AMD-only math)"),
                       ("ptxas", "ptxas error"), ("deadline", "timed out"), ("timed out", "timed out"),
                       ("out of memory", "out of memory"),
                       ("illegal memory access", "CUDA illegal memory access"),
                       ("device-side assert", "CUDA device-side assert"),
                       ("torch_use_cuda_dsa", "CUDA device-side assert"),
                       ("failed to import", "perf file import error"),
                       ("disagree", "reference disagrees with itself"), ("wrong result", "reference not reproducible"),
                       ("outofresources", "out of shared memory"), ("out of resource", "out of shared memory"),
                       ("hip", "AMD-only API"), ("import failed", "import error")):
        if key in low:
            return label
    return "other: " + brief(reason, 100)


def summary(entries: dict[str, dict], starting: bool = False) -> list[str]:
    valid = sum(e["status"] == VALID for e in entries.values())
    limits = Counter(replay_limit(e["reason"]) for e in entries.values() if e["status"] == NOT_REPLAYABLE)
    invalid = len(entries) - valid - sum(limits.values())
    lines = [f"{valid} of {len(entries)} tasks valid here; {invalid} invalid-here"
             + (f"; {sum(limits.values())} not replayable (the replay's own limit, not the task's)" if limits else "")]
    classes = Counter(reason_class(e["reason"], starting) for e in entries.values() if e["status"] == INVALID)
    for label, n in classes.most_common():
        lines.append(f"  {n:4d}  {label}")
    for label, n in limits.most_common():
        lines.append(f"  {n:4d}  not replayable: {label}")
    return lines


def replay_limit(reason: str) -> str:
    """What a not-replayable reason names (the op or pattern), for a summary line."""
    what = reason.split("not replayable: ", 1)[-1]
    return brief(what.split(" (")[0].split(";")[0], 90)
