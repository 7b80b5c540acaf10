"""fitness/evaluator.py: what a verdict records about where its time went (the cascade itself is
covered by the exploit, suite and search tests)."""


def test_a_verdict_says_where_the_workers_time_went(evaluator, builtin):
    task = builtin["softmax"]
    v = evaluator.evaluate(task, task.start_source)
    assert v.passed, v.reason
    w = v.phases["worker_ms"]
    assert {"import", "inputs", "first_case", "other_cases", "to_host", "handle", "forget"} <= set(w)
    # nested phases add up inside their parents; the engine's wait covers the worker's handling
    assert w["inputs"] + w["to_host"] <= w["first_case"] + w["other_cases"] <= w["handle"]
    assert w["import"] + w["first_case"] + w["other_cases"] <= w["handle"] <= 1000 * v.phases["worker_s"]
    assert v.phases["reference_compare_s"] >= 0
