"""evolve/commands.py: `list` and `validate` run in-process on the builtin suite. validate's logic
(recording as each task finishes, --pending, the retry alone, Ctrl-C) is driven by a validator
that hands over prepared verdicts, as an evaluator would; one slow test validates a real task
with the real evaluator. (The command line around them: tests/test_cli.py.)"""
import json
from contextlib import contextmanager
from dataclasses import replace

import pytest

from evolve.commands import ValidateOptions, guard_marks, list_tasks, validate
from fitness.clean.guard_bands import Finding
from fitness.engine.script_eval import ScriptReference
from fitness.engine.verdict import Verdict
from suites import validation
from suites.registry import SuiteError, SuiteTasks, load_suite, select
from tests.conftest import CHEAP, CHEAP_TOO

DEVICE = "cpu (Triton interpreter)"


@pytest.fixture(scope="module")
def suite():
    return load_suite("builtin")


def ok(task: str, speedup: float | None = None) -> Verdict:
    return Verdict(task, stage="timed" if speedup else "correct", correct=True, heldout_correct=True,
                   speedup=speedup, device=DEVICE, sandbox="none", baseline="reference",
                   timing="not timed: no GPU" if speedup is None else "")


def failed(task: str, reason: str, stage: str = "compile") -> Verdict:
    return Verdict(task, stage=stage, reason=reason, device=DEVICE, sandbox="none", baseline="reference")


class Validator:
    """Hands over the verdicts prepared for it (per pass, in order), like an evaluator's
    validate_iter; records what it was asked and what the record held as each was asked for."""

    def __init__(self, passes: list[dict[str, Verdict]], record=None, interrupt_after: int | None = None):
        self.passes, self.record, self.interrupt_after = passes, record, interrupt_after
        self.asked: list[tuple[int, list[str], bool]] = []  # (workers, tasks, timed)
        self.seen_in_record: list[set[str]] = []
        self.script_refs: dict = {}

    def make(self, workers: int):
        @contextmanager
        def entered():
            yield _Pass(self, workers)
        return entered()


class _Pass:
    def __init__(self, owner: Validator, workers: int):
        self.owner, self.workers = owner, workers
        self.script_refs = owner.script_refs

    def validate_iter(self, tasks, timed=True):
        o = self.owner
        o.asked.append((self.workers, [t.name for t in tasks], timed))
        verdicts = o.passes[len(o.asked) - 1]
        for i, t in enumerate(tasks):
            if o.record is not None:
                o.seen_in_record.append(set(validation.read(o.record).get("tasks", {})))
            if o.interrupt_after is not None and i == o.interrupt_after:
                raise KeyboardInterrupt
            yield verdicts[t.name]

    def reference_status(self, task):
        return "ok"


def options(tmp_path, **kw) -> ValidateOptions:
    return ValidateOptions(suite="builtin", record=tmp_path / "v.json", **kw)


def two(suite):
    return select(suite, f"{CHEAP},{CHEAP_TOO}")


# -- list ------------------------------------------------------------------------------------------
def test_list_shows_each_tasks_marks_from_the_validation_record(suite, tmp_path, capsys):
    record = tmp_path / "v.json"
    record.write_text(json.dumps({"suite": "builtin", "device": DEVICE, "tasks": {
        "softmax": {"status": "invalid-here", "reason": "x", "weak_test": False},
        "cumsum": {"status": "valid", "reason": "", "weak_test": True},
        "attention": {"status": "invalid-here", "reason": "y", "weak_test": True},
        "int8_dequant": {"status": "valid", "reason": "", "weak_test": False}}}))
    assert list_tasks(suite, "builtin", record, as_json=False) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:len(suite) + 1]}
    assert set(rows) == set(suite)
    assert rows["softmax"].endswith(" invalid-here") and rows["cumsum"].endswith(" weak-test")
    assert rows["attention"].endswith(" invalid-here,weak-test")
    assert rows["int8_dequant"].endswith(f"{suite['int8_dequant'].entry:28} ")  # valid: no mark
    t = suite["int8_dequant"]
    assert rows["int8_dequant"].split()[1:4] == [t.category, str(t.difficulty), t.entry]


def test_list_counts_the_tasks_by_difficulty_and_category_and_asks_for_a_record_when_there_is_none(
        suite, tmp_path, capsys):
    list_tasks(suite, "builtin", tmp_path / "none.json", as_json=False)
    out = capsys.readouterr().out.splitlines()
    assert out[len(suite) + 1] == f"{len(suite)} tasks in suite 'builtin'"
    by_diff = dict(part.split(": ") for part in out[len(suite) + 2].removeprefix("by difficulty: ").split(", "))
    by_cat = dict(part.split(": ") for part in out[len(suite) + 3].removeprefix("by category: ").split(", "))
    assert sum(map(int, by_diff.values())) == sum(map(int, by_cat.values())) == len(suite)
    assert list(by_cat) == sorted(by_cat) and list(by_diff) == sorted(by_diff, key=int)
    assert int(by_cat["quantization"]) == sum(t.category == "quantization" for t in suite.values())
    assert out[-1].startswith(f"(no validation record at {tmp_path / 'none.json'}: run validate")


def test_a_task_without_a_difficulty_is_shown_as_a_dash_and_counted_last(suite, tmp_path, capsys):
    tasks = SuiteTasks({n: replace(t, difficulty=None) if n == CHEAP else t for n, t in two(suite).items()})
    list_tasks(tasks, "builtin", tmp_path / "v.json", as_json=False)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(CHEAP + " "))
    assert row.split()[2] == "-"
    assert f"by difficulty: {suite[CHEAP_TOO].difficulty}: 1, -: 1" in out


def test_list_as_json_carries_each_tasks_marks_and_what_a_search_starts_from(suite, tmp_path, capsys):
    record = tmp_path / "v.json"
    validation.merge(record, "builtin", DEVICE, {CHEAP: {"status": "invalid-here", "reason": "r",
                                                         "weak_test": True}})
    assert list_tasks(two(suite), "builtin", record, as_json=True) == 0
    got = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert got[CHEAP]["marks"] == "invalid-here,weak-test" and got[CHEAP_TOO]["marks"] == ""
    t = suite[CHEAP_TOO]
    assert got[CHEAP_TOO] == {"name": t.name, "category": t.category, "entry": t.entry, "dtypes": list(t.dtypes),
                              "difficulty": t.difficulty, "marks": "", "instruction": t.instruction,
                              "start_source": t.start_source}


def test_list_warns_of_task_files_that_could_not_be_loaded(suite, tmp_path, capsys):
    tasks = two(suite)
    tasks.problems = ["broken.py: SyntaxError: invalid syntax"]
    assert list_tasks(tasks, "mine", tmp_path / "v.json", as_json=False) == 0
    captured = capsys.readouterr()
    assert captured.err == "warning: broken.py: SyntaxError: invalid syntax\n"
    assert "2 tasks in suite 'mine'" in captured.out


def test_list_refuses_a_damaged_record_in_one_line(suite, tmp_path):
    (tmp_path / "v.json").write_text('{"tasks": [1, 2]}')
    with pytest.raises(SuiteError, match="unreadable validation record"):
        list_tasks(suite, "builtin", tmp_path / "v.json", as_json=False)


# -- validate --------------------------------------------------------------------------------------
def test_validate_records_each_task_as_it_finishes_and_sums_up(suite, tmp_path, capsys):
    opts = options(tmp_path, timed=False)
    v = Validator([{CHEAP: ok(CHEAP), CHEAP_TOO: failed(CHEAP_TOO, "RuntimeError: boom")}], opts.record)
    assert validate(two(suite), opts, v.make) == 0
    assert v.asked == [(1, [CHEAP, CHEAP_TOO], False)]
    assert v.seen_in_record == [set(), {CHEAP}]  # the first was on disk before the second was asked for
    record = validation.read(opts.record)
    assert record["device"] == DEVICE and record["tasks"][CHEAP]["status"] == "valid"
    assert record["tasks"][CHEAP_TOO] == {"status": "invalid-here", "reason": "RuntimeError: boom",
                                          "weak_test": False, "stage": "compile", "speedup": None}
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["task", "status", "held-out", "speedup", "note"]
    assert out[1].split() == [CHEAP, "correct", "ok", "-"]
    assert out[2].split()[:4] == [CHEAP_TOO, "crashed", "FAIL", "-"] and out[2].endswith("RuntimeError: boom")
    assert out[3].startswith("1/2 starting kernels correct (tuning and held-out cases); not timed: no GPU")
    assert out[4] == f"device: {DEVICE}; sandbox: none"
    assert "1 of 2 tasks valid here; 1 invalid-here" in out
    assert out[-1] == f"recorded in {opts.record} (2 task(s) so far)"


def test_validate_sums_up_the_timed_speedups_as_a_geometric_mean(suite, tmp_path, capsys):
    v = Validator([{CHEAP: ok(CHEAP, 2.0), CHEAP_TOO: ok(CHEAP_TOO, 8.0)}])
    validate(two(suite), options(tmp_path), v.make)
    out = capsys.readouterr().out
    assert f"{CHEAP:40} correct        ok          2.000" in out
    assert "2/2 starting kernels correct (tuning and held-out cases); geometric-mean speedup vs reference: " \
           "4.000 over 2 timed" in out


def test_pending_validates_only_the_tasks_the_record_lacks(suite, tmp_path, capsys):
    opts = options(tmp_path, pending=True)
    validation.merge(opts.record, "builtin", DEVICE, {CHEAP: validation.entry(ok(CHEAP), False)})
    v = Validator([{CHEAP_TOO: ok(CHEAP_TOO)}])
    assert validate(two(suite), opts, v.make) == 0
    assert v.asked == [(1, [CHEAP_TOO], True)]
    assert f"1 task(s) already in {opts.record}; validating the 1 others" in capsys.readouterr().out
    assert set(validation.read(opts.record)["tasks"]) == {CHEAP, CHEAP_TOO}


def test_ctrl_c_returns_130_and_says_how_many_tasks_were_recorded(suite, tmp_path, capsys):
    opts = options(tmp_path)
    v = Validator([{CHEAP: ok(CHEAP), CHEAP_TOO: ok(CHEAP_TOO)}], interrupt_after=1)
    assert validate(two(suite), opts, v.make) == 130
    assert set(validation.read(opts.record)["tasks"]) == {CHEAP}
    assert capsys.readouterr().err == \
        f"interrupted: 1 task(s) recorded in {opts.record}; go on with `validate --pending`\n"


def test_ctrl_c_before_any_task_finished_names_no_record_and_a_command_to_paste(suite, tmp_path, capsys):
    """It named a record it never wrote, and `validate --pending`, which is not a command."""
    command = f"triton-evolve validate --suite builtin --tasks {CHEAP},{CHEAP_TOO} --validation {tmp_path / 'v.json'}"
    opts = options(tmp_path, command=command)
    assert validate(two(suite), opts, Validator([{}], interrupt_after=0).make) == 130
    assert not opts.record.exists()
    assert capsys.readouterr().err == \
        f"interrupted before any task finished: nothing recorded; start again with `{command}`\n"
    v = Validator([{CHEAP: ok(CHEAP), CHEAP_TOO: ok(CHEAP_TOO)}], interrupt_after=1)
    assert validate(two(suite), opts, v.make) == 130
    assert capsys.readouterr().err.endswith(f"go on with `{command} --pending`\n")


def test_a_failure_another_process_on_the_gpu_may_have_caused_is_validated_again_alone(suite, tmp_path, capsys):
    opts = options(tmp_path, workers=2)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    v = Validator([{CHEAP: failed(CHEAP, oom), CHEAP_TOO: failed(CHEAP_TOO, "ValueError: wrong shape")},
                   {CHEAP: ok(CHEAP, 1.5)}])
    assert validate(two(suite), opts, v.make) == 0
    assert v.asked == [(2, [CHEAP, CHEAP_TOO], True), (1, [CHEAP], True)]  # only the GPU failure, one worker
    out = capsys.readouterr().out
    assert f"retrying 1 task(s) alone, with the GPU to themselves: {CHEAP}" in out
    assert out.count("starting kernels correct") == 1 and "1/2 starting kernels correct" in out
    tasks = validation.read(opts.record)["tasks"]
    assert tasks[CHEAP]["status"] == "valid" and tasks[CHEAP_TOO]["status"] == "invalid-here"


def test_with_one_worker_a_gpu_failure_is_not_retried(suite, tmp_path, capsys):
    oom = "CUDA out of memory"
    v = Validator([{CHEAP: failed(CHEAP, oom), CHEAP_TOO: ok(CHEAP_TOO)}])
    validate(two(suite), options(tmp_path), v.make)
    assert len(v.asked) == 1 and "retrying" not in capsys.readouterr().out


def test_json_output_holds_the_final_verdicts_after_a_retry(suite, tmp_path, capsys):
    opts = options(tmp_path, workers=2, as_json=True)
    v = Validator([{CHEAP: failed(CHEAP, "illegal memory access"), CHEAP_TOO: ok(CHEAP_TOO)},
                   {CHEAP: ok(CHEAP)}])
    assert validate(two(suite), opts, v.make) == 0
    out = capsys.readouterr().out
    got = json.loads(out[out.index("["):])
    assert sorted((d["task"], d["passed"]) for d in got) == [(CHEAP, True), (CHEAP_TOO, True)]
    assert "task  " not in out  # no table


def test_a_verdict_without_a_device_is_shown_but_not_recorded(suite, tmp_path, capsys):
    opts = options(tmp_path)
    v = Validator([{CHEAP: replace(failed(CHEAP, "the pool is closed", "none"), device=""),
                    CHEAP_TOO: replace(ok(CHEAP_TOO), device="")}])
    assert validate(two(suite), opts, v.make) == 0
    out = capsys.readouterr().out
    assert not opts.record.exists() and "recorded in" not in out
    assert f"{CHEAP:40} refused" in out and "device: none (no code ran); sandbox: none" in out


def test_task_files_that_could_not_be_loaded_make_validate_exit_2_after_the_others(suite, tmp_path, capsys):
    tasks = two(suite)
    tasks.problems = ["bad.py: NameError: name 'x' is not defined"]
    v = Validator([{CHEAP: ok(CHEAP), CHEAP_TOO: ok(CHEAP_TOO)}])
    assert validate(tasks, options(tmp_path), v.make) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["warning: bad.py: NameError: name 'x' is not defined",
                   "not validated: bad.py: NameError: name 'x' is not defined",
                   "1 task file(s) could not be loaded: fix them and validate again"]
    assert len(validation.read(options(tmp_path).record)["tasks"]) == 2


def test_a_script_tasks_guard_band_findings_are_kept_in_the_record():
    ref = ScriptReference(unstable={3: Finding("reads outside its inputs", "32 bytes past x"),
                                    1: Finding("not reproducible", "max diff 0.5")},
                          unchecked="perf 7: timed out")
    assert guard_marks(ref) == {"unstable_perf": {"1": "not reproducible (max diff 0.5)",
                                                  "3": "reads outside its inputs (32 bytes past x)"},
                                "guard_unchecked": "perf 7: timed out"}
    assert guard_marks(ScriptReference()) == {} and guard_marks(None) == {}


@pytest.mark.slow
def test_validate_of_a_real_starting_kernel_with_the_real_evaluator(suite, tmp_path, capsys):
    from fitness.engine.evaluator import EvalConfig, Evaluator

    opts = options(tmp_path, timed=False)
    tasks = select(suite, CHEAP)
    assert validate(tasks, opts, lambda w: Evaluator(EvalConfig(workers=w, device="cpu", sandbox=False,
                                                                timeout_s=120, mem_limit_gb=8))) == 0
    entry = validation.read(opts.record)["tasks"][CHEAP]
    assert entry["status"] == "valid" and entry["speedup"] is None, entry
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:4] == [CHEAP, "correct", "ok", "-"]
    assert "1/1 starting kernels correct" in out


@pytest.mark.slow
def test_torch_glue_in_a_start_without_torch_ops_is_named_with_the_setting_that_allows_it(tmp_path, capsys):
    """It was labelled `crashed`, and neither the note nor the record named TORCH_OPS."""
    from tests.test_validation import validated_template

    entry = validated_template(tmp_path, "    return out\n'''", "    return alpha * x + y + 0 * out\n'''")
    assert 'torch did work outside Triton kernels (TORCH_OPS = "allowed" in the task file allows it): ' \
           in entry["reason"]
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:4] == ["my_op", "torch", "work", "FAIL"] and 'TORCH_OPS = "allowed"' in out[1]
    assert "     1  torch work outside the Triton kernels" in out


def refused(task: str) -> Verdict:
    """A static-gate refusal as the evaluator gives it: no child ran it, so it names no device."""
    return Verdict(task, stage="none", reason="static gate: import of 'os' is not allowed in a kernel (line 2)",
                   sandbox="bubblewrap")


def test_a_start_the_static_gate_refused_is_counted_and_recorded_with_the_device_of_the_others(
        suite, tmp_path, capsys):
    """It was left out of the record and its counts, and first in the table it blanked the device
    line: '0/2 starting kernels correct' / 'device: ;' / '0 of 1 tasks valid here'."""
    opts = options(tmp_path, timed=False)
    v = Validator([{CHEAP: refused(CHEAP), CHEAP_TOO: failed(CHEAP_TOO, "RuntimeError: boom")}], opts.record)
    assert validate(two(suite), opts, v.make) == 0
    record = validation.read(opts.record)
    assert record["device"] == DEVICE and record["tasks"][CHEAP]["status"] == "invalid-here"
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == [CHEAP, "refused"]
    assert out[4] == f"device: {DEVICE}; sandbox: none"
    assert "0 of 2 tasks valid here; 2 invalid-here" in out and "     1  refused by the static gate" in out
    alone = tmp_path / "alone.json"  # every start refused: recorded all the same, on no device
    validate(select(suite, CHEAP), ValidateOptions("builtin", alone), Validator([{CHEAP: refused(CHEAP)}]).make)
    assert list(validation.read(alone)["tasks"]) == [CHEAP]
    assert "device: none (no code ran); sandbox: bubblewrap" in capsys.readouterr().out
