"""fitness/engine/reference_service.py: references and comparisons in clean reference children (on a
GPU machine; here their CPU twin), with the engine computing only where no child answers."""
import pytest
import torch

from fitness.common.compare import compare_outputs
from fitness.common.inputs import draw_inputs
from fitness.common.reference import ReferenceCache
from fitness.engine.evaluator import EvalConfig, Evaluator
from fitness.engine.gpu_memory import ChildRole
from fitness.engine.pool import WorkerPool
from fitness.engine.reference_service import ReferenceService
from fitness.engine.sandbox import detect


def spec(task):
    return {"suite": task.suite, "name": task.name, "path": None}


@pytest.fixture()
def service():
    local = ReferenceCache(1 << 30, "cpu")
    s = ReferenceService(WorkerPool(2, detect(True), True, 4 << 30, role=ChildRole("clean")), local, spec, 60.0)
    yield s
    s.close()


def outputs_of(task, case):
    """What an honest candidate's child would send: the task's own function in its dtype."""
    args = draw_inputs(task, case, case["seed"], "cpu")
    return [task.reference(*args)]


def case(seed, shape=None):
    return {"split": "tuning", "shape": shape or {"M": 64, "N": 256}, "dtype": "float32", "seed": seed}


@pytest.mark.slow
def test_a_reference_child_passes_right_outputs_and_names_what_is_wrong_in_others(builtin, service):
    task = builtin["softmax"]
    good = case(11)
    service.prefetch(task, good)
    assert service.check(task, good, outputs_of(task, good)) == ""
    other = case(12)
    stale = outputs_of(task, good)  # right for another seed: a result prepared earlier
    problem = service.check(task, other, stale)
    refs, expected = service.local.get(task, other)  # the engine's own verdict, for comparison
    assert problem and problem == compare_outputs(stale, refs, task.tolerance, expected=expected)
    short = service.check(task, other, [outputs_of(task, other)[0][:, :128]])
    assert "shape" in short
    assert service.stats.checks == 3 and service.stats.fallbacks == 0


@pytest.mark.slow
def test_a_reference_child_that_died_is_replaced_and_the_comparison_still_answered(builtin, service):
    task = builtin["softmax"]
    first = case(21)
    assert service.check(task, first, outputs_of(task, first)) == ""
    for holder in service._children:
        if holder._child is not None:
            holder._child.kill()  # as a crash would leave it
    for seed in (22, 23, 24):
        c = case(seed)
        assert service.check(task, c, outputs_of(task, c)) == ""
    bad = case(25)
    wrong = [outputs_of(task, bad)[0] + 0.5]
    assert "outside tolerance" in service.check(task, bad, wrong)
    assert service.stats.fallbacks == 0 and service.local.computed == 0  # all answered by children
    assert service.pool.restarts >= 1  # at least one fresh child replaced a killed one


@pytest.mark.slow
def test_where_no_reference_child_can_answer_the_engine_compares_itself(builtin):
    nowhere = {"suite": "builtin", "name": "no-such-task", "path": None}  # the child cannot load it
    # on the CPU, as the service's child and outputs_of are (on a GPU machine an "auto" evaluator
    # drew its references on the GPU, other numbers: failed on the H200)
    with Evaluator(EvalConfig(workers=1, sandbox=False, device="cpu")) as ev:
        s = ReferenceService(WorkerPool(1, detect(True), True, 4 << 30, role=ChildRole("clean")), ev.references,
                             lambda t: nowhere, 60.0)
        ev.ref_service = ev.outputs.service = s  # as on a GPU machine (the oracle holds it since the stages split)
        task = builtin["softmax"]
        c = case(31)
        assert s.check(task, c, outputs_of(task, c)) is None  # no answer: the caller compares
        assert ev.check_case(task, c, outputs_of(task, c)) == ""
        assert "outside tolerance" in ev.check_case(task, c, [torch.zeros(64, 256)])
        assert s.stats.fallbacks == 3 and s.stats.checks == 0 and ev.references.computed == 1
