"""fitness/engine/correctness.py: the correctness stage's schedule, on CPU (Triton interpreter), and
the CorrectnessResult it returns (one Failure when it fails; traces only when the candidate goes on)."""
import time

import pytest

from fitness.common.flags import Flag
from fitness.common.replies import CaseRan, Reply
from fitness.engine.correctness import Progress, judged
from fitness.engine.verdict import Failure


@pytest.mark.slow
def test_outputs_are_compared_beside_the_child_and_its_slot_is_given_back_before_the_last_comparison(
        evaluator, builtin, monkeypatch):
    task = builtin["softmax"]
    ended: list[float] = []  # when each comparison ended, and when the child's slot was given back
    given_back: list[float] = []
    compare = evaluator.outputs.check_case

    def slow(task, case, outputs):
        time.sleep(0.3)
        problem = compare(task, case, outputs)
        ended.append(time.monotonic())
        return problem
    give_back = evaluator.pool._give_back

    def noted(t0):
        given_back.append(time.monotonic())
        give_back(t0)
    monkeypatch.setattr(evaluator.outputs, "check_case", slow)
    monkeypatch.setattr(evaluator.pool, "_give_back", noted)
    v = evaluator.evaluate(task, task.start_source)
    assert v.passed, v.reason
    compared = [c for c in v.cases if c["split"] in ("tuning", "heldout")]
    assert len(compared) >= 8 and all(c["ok"] for c in compared)
    # the first slot given back is the correctness child's (the replay's comes after, on CPU)
    assert given_back[0] < max(ended[:len(compared)])
    assert v.phases["reference_compare_s"] >= 0.3 * len(compared)


@pytest.mark.slow
def test_every_case_of_a_wrong_kernel_is_reported_in_the_order_it_ran(evaluator, builtin):
    task = builtin["softmax"]
    wrong = task.start_source.replace("tl.exp(x - row_max) / denom", "tl.exp(x - row_max) / denom + 0.5")
    assert wrong != task.start_source
    v = evaluator.evaluate(task, wrong)
    assert not v.passed and v.reason.startswith("wrong result on tuning shape"), v.reason
    splits = [c["split"] for c in v.cases]
    assert splits == sorted(splits, key=["tuning", "heldout"].index) and not any(c["ok"] for c in v.cases)
    assert v.cases[0]["error"] in v.reason


# -- the stage's result, from a run's progress (no child: the replies as a child gives them) ---------------
TUNING = {"split": "tuning", "shape": {"M": 4}, "dtype": "float32", "seed": 3}
HELDOUT = {"split": "heldout", "shape": {"M": 8}, "dtype": "float32", "seed": 4}


def _compared(*cases, wrong=()) -> list[dict]:
    return [{**c, "ok": c not in wrong, "error": "outside tolerance" if c in wrong else ""} for c in cases]


def test_a_kernel_right_on_every_case_is_correct_and_its_traces_go_on():
    run = Progress(stage="call", device="cpu", sandbox="bwrap", reply=Reply(CaseRan(outputs=())))
    found = judged(run, _compared(TUNING, HELDOUT), [TUNING, HELDOUT])
    assert (found.stage, found.correct, found.heldout_correct, found.failure) == ("correct", True, True, None)
    assert found.traces is run.traces and found.device == "cpu" and len(found.cases) == 2


def test_a_wrong_tuning_case_stops_the_cascade_with_one_failure_naming_the_case_and_seed():
    found = judged(Progress(stage="call"), _compared(TUNING, HELDOUT, wrong=(TUNING,)), [TUNING, HELDOUT])
    assert found.traces is None and found.stage == "call" and not found.correct and found.heldout_correct
    assert found.failure == Failure("wrong result on tuning shape {'M': 4} float32 (seed 3): outside tolerance", "call")


def test_a_held_out_crash_that_replaced_the_child_still_goes_on_to_the_replay():
    run = Progress(stage="call", reply=Reply(None, error="CUDA fault", fatal=True, stage="call"),
                   failed=HELDOUT)
    found = judged(run, _compared(TUNING), [TUNING, HELDOUT])
    assert found.traces is run.traces and found.stage == "correct" and found.correct and not found.heldout_correct
    assert found.failure == Failure("heldout case {'M': 8} float32: CUDA fault", "correct", (Flag.WORKER_REPLACED,))
    assert found.cases[-1] == {**HELDOUT, "ok": False, "error": "CUDA fault"}


def test_a_candidate_that_does_not_import_fails_at_the_stage_its_child_reached():
    run = Progress(reply=Reply(None, error="SyntaxError: invalid syntax", stage="parse"))
    found = judged(run, [], [TUNING, HELDOUT])
    assert found.traces is None and found.failure == Failure("SyntaxError: invalid syntax", "parse")
    assert found.cases == ({"ok": False, "error": "SyntaxError: invalid syntax"},)


@pytest.mark.slow
def test_the_stage_runs_in_a_real_child_and_returns_its_record_without_a_verdict(evaluator, builtin):
    task = builtin["softmax"]
    judge = evaluator.judge(task)
    found = evaluator.correctness.run(task, judge, task.start_source)
    assert found.failure is None and found.stage == "correct" and found.correct and found.heldout_correct
    assert len(found.traces.calls) == sum(c["split"] in ("tuning", "heldout") for c in found.cases)
    assert "candidate's process" in found.sandbox and found.phases["worker_s"] > 0
    wrong = evaluator.correctness.run(task, judge, f"import triton\n\ndef {task.entry}(x):\n    return x\n")
    assert wrong.traces is None and wrong.failure is not None and wrong.failure.stage == wrong.stage
