"""fitness/correctness.py: the correctness stage's schedule, on CPU (Triton interpreter)."""
import time

from fitness.evaluator import Evaluator


def test_outputs_are_compared_while_the_child_runs_on_and_its_slot_is_not_held_for_them(evaluator, builtin,
                                                                                        monkeypatch):
    task = builtin["softmax"]
    compare = Evaluator.check_case

    def slow(task, case, outputs):  # a comparison that takes longer than the child's whole run
        time.sleep(1.5)
        return compare(evaluator, task, case, outputs)
    monkeypatch.setattr(evaluator, "check_case", slow)
    held_before = evaluator.pool.busy_s
    v = evaluator.evaluate(task, task.start_source)
    # the correctness child's slot (the replay's child, on CPU from the same pool, apart)
    held = evaluator.pool.busy_s - held_before - v.phases["replay_s"]
    assert v.passed, v.reason
    compared = [c for c in v.cases if c["split"] in ("tuning", "heldout")]
    assert len(compared) >= 8 and all(c["ok"] for c in compared)
    compare_s = v.phases["reference_compare_s"]
    assert compare_s >= 1.5 * len(compared)
    # one after another, the comparisons would have held the slot for all of compare_s beside
    # the child's own work; beside it, only for the last one's
    child_s = v.phases["worker_ms"]["handle"] / 1000
    assert held < child_s + compare_s / 2, (held, child_s, compare_s)


def test_every_case_of_a_wrong_kernel_is_reported_in_the_order_it_ran(evaluator, builtin):
    task = builtin["softmax"]
    wrong = task.start_source.replace("tl.exp(x - row_max) / denom", "tl.exp(x - row_max) / denom + 0.5")
    assert wrong != task.start_source
    v = evaluator.evaluate(task, wrong)
    assert not v.passed and v.reason.startswith("wrong result on tuning shape"), v.reason
    splits = [c["split"] for c in v.cases]
    assert splits == sorted(splits, key=["tuning", "heldout"].index) and not any(c["ok"] for c in v.cases)
    assert v.cases[0]["error"] in v.reason
