"""GPU timing produces complete, self-consistent rows (values are machine-dependent: the
numbers themselves are reported by bench/evaluator_bench.py, never asserted here)."""
import math

import pytest
import torch

from fitness.gpu_timing import SetCache
from fitness.harness import InputCache


def test_set_cache_draws_once_and_matches_the_case_seed(builtin):
    task = builtin["softmax"]
    case = {"shape": {"M": 8, "N": 16}, "dtype": "float32", "seed": 7}
    cache = SetCache(1 << 20, device="cpu")
    draw, spare = cache.get(task, case)
    # the timed draw is the case's own; the spare differs from it
    assert torch.equal(draw[0], InputCache(1 << 20).get(task, case)[0])
    assert not torch.equal(draw[0], spare[0])
    again = cache.get(task, case)
    assert again[0][0] is draw[0] and again[1][0] is spare[0]  # kept, not drawn again


def test_set_cache_drops_the_least_recently_used_case(builtin):
    task = builtin["softmax"]
    cases = [{"shape": {"M": 64, "N": 64}, "dtype": "float32", "seed": s} for s in (1, 2, 3)]
    case_bytes = 2 * 64 * 64 * 4
    cache = SetCache(2 * case_bytes, device="cpu")
    for c in cases[:2]:
        cache.get(task, c)
    cache.get(task, cases[0])  # case 0 is now the most recent
    cache.get(task, cases[2])
    assert set(cache.items) == {task.case_key(cases[0]), task.case_key(cases[2])}
    assert cache.bytes == 2 * case_bytes


@pytest.mark.gpu
def test_timed_verdict_has_rows_floors_and_a_speedup(evaluator, builtin):
    task = builtin["softmax"]
    v = evaluator.evaluate(task, task.start_source)
    assert v.stage == "timed" and v.passed, v.reason
    assert len(v.times) == len(task.shapes.tuning) * len(task.dtypes)
    for row in v.times:
        assert row["candidate_ms"] > 0 and row["baseline_ms"] > 0 and row["floor_ms"] > 0
        assert row["method"] in ("cuda-graph", "eager") and row["input_sets"] >= 1
        assert set(row["phase_ms"]) == {"draw", "warm_up", "calibrate", "capture", "trials"}
    logs = [math.log(r["speedup"]) for r in v.times]
    assert v.speedup == pytest.approx(math.exp(sum(logs) / len(logs)))


@pytest.mark.gpu
def test_non_capturable_candidate_is_timed_eagerly(evaluator, builtin):
    """A host sync inside the call (.item()) breaks graph capture: both sides are timed eagerly."""
    task = builtin["softmax"]
    src = task.start_source.replace("    return y", "    _ = y[0, 0].item()\n    return y")
    assert src != task.start_source
    v = evaluator.evaluate(task, src)
    assert v.stage == "timed", v.reason
    assert {r["method"] for r in v.times} == {"eager"}
