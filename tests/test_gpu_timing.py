"""GPU timing produces complete, self-consistent rows (values are machine-dependent: the
numbers themselves are reported by bench/evaluator_bench.py, never asserted here)."""
import math

import pytest

pytestmark = pytest.mark.gpu


def test_timed_verdict_has_rows_floors_and_a_speedup(evaluator, builtin):
    task = builtin["softmax"]
    v = evaluator.evaluate(task, task.start_source)
    assert v.stage == "timed" and v.passed, v.reason
    assert len(v.times) == len(task.shapes.tuning) * len(task.dtypes)
    for row in v.times:
        assert row["candidate_ms"] > 0 and row["baseline_ms"] > 0 and row["floor_ms"] > 0
        assert row["method"] in ("cuda-graph", "eager") and row["input_sets"] >= 1
    logs = [math.log(r["speedup"]) for r in v.times]
    assert v.speedup == pytest.approx(math.exp(sum(logs) / len(logs)))


def test_non_capturable_candidate_is_timed_eagerly(evaluator, builtin):
    """A host sync inside the call (.item()) breaks graph capture: both sides are timed eagerly."""
    task = builtin["softmax"]
    src = task.start_source.replace("    return y", "    _ = y[0, 0].item()\n    return y")
    assert src != task.start_source
    v = evaluator.evaluate(task, src)
    assert v.stage == "timed", v.reason
    assert {r["method"] for r in v.times} == {"eager"}
