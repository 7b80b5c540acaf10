"""fitness/engine/evaluator.py: what a verdict records about where its time went (the cascade itself is
covered by the exploit, suite and search tests)."""
import pytest


@pytest.mark.slow
def test_a_verdict_says_where_the_workers_time_went(evaluator, builtin):
    task = builtin["softmax"]
    v = evaluator.evaluate(task, task.start_source)
    assert v.passed, v.reason
    w = v.phases["worker_ms"]
    assert {"import", "inputs", "handle", "to_host"} <= set(w)
    assert w["import"] + w["inputs"] + w["to_host"] <= w["handle"] <= 1000 * v.phases["worker_s"]
    assert v.phases["replay_s"] > 0


@pytest.mark.slow
def test_every_evaluation_draws_its_own_seeds_and_heldout_shapes(evaluator, builtin):
    task = builtin["softmax"]
    a, b = (evaluator.evaluate(task, task.start_source) for _ in range(2))
    assert a.passed and b.passed
    seeds = lambda v: {c["seed"] for c in v.cases}
    heldout = lambda v: [c["shape"] for c in v.cases if c["split"] == "heldout"]
    assert not seeds(a) & seeds(b)
    assert heldout(a) != heldout(b)
