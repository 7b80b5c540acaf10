"""fitness/engine/correctness.py: the correctness stage's schedule, on CPU (Triton interpreter)."""
import time

import pytest


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
