"""fitness/engine/replay.py: the replay stage, handed its settings, the engine's oracle and a pool,
returns a ReplayResult; a call that does not check out fails it at the call, naming that call."""
import dataclasses

import pytest

from fitness.common.reference import ReferenceCache
from fitness.engine.correctness import Traces
from fitness.engine.outputs import EngineOracle
from fitness.engine.replay import Replayer, ReplayResult
from fitness.engine.settings import StageSettings
from suites.tritonbench import load as load_tritonbench
from tests.suite_fixtures import write_tritonbench
from tests.test_judges import _judge_for, function_judge

CASE = {"split": "tuning", "shape": {"M": 4, "N": 8}, "dtype": "float32", "seed": 1}


def _replayer() -> Replayer:
    """A replayer with no pool: these replays must end before any child is asked."""
    return Replayer(None, StageSettings(), EngineOracle(ReferenceCache()))


def _traces(*calls) -> Traces:
    traces = Traces()
    traces.calls.extend(calls)
    return traces


def test_an_in_place_task_whose_call_wrote_elsewhere_fails_at_the_call_before_any_child_runs(builtin):
    task = dataclasses.replace(builtin["softmax"], inplace=(0,))
    elsewhere = {"outputs": [{"__t__": {"t": 1}}], "buffers": {1: {"from": "alloc"}}}
    found = _replayer().run(task, function_judge(task), "", _traces((CASE, elsewhere)))
    assert found.failure is not None and found.failure.stage == "call" and found.phases == {}
    assert found.failure.reason.startswith("replay: the outputs of an in-place task must be its inputs 0")


def test_a_script_task_s_calls_are_left_to_the_timing_and_pass_the_replay_untouched(tmp_path):
    task = next(iter(load_tritonbench(str(write_tritonbench(tmp_path))).values()))
    found = _replayer().run(task, _judge_for(task), "", _traces((CASE, {"outputs": []})))
    assert found == ReplayResult()


@pytest.mark.slow
def test_a_failed_replay_names_the_call_and_stops_the_cascade(evaluator, builtin):
    """Real children: the start kernel's own traces replay clean; the same traces with their
    launches taken out leave the outputs unwritten, and the first call fails the stage."""
    task = builtin["softmax"]
    judge = evaluator.judge(task)
    correct = evaluator.correctness.run(task, judge, task.start_source)
    assert correct.failure is None and correct.traces is not None and correct.traces.calls
    clean = evaluator.replayer.run(task, judge, task.start_source, correct.traces)
    assert clean.failure is None and clean.phases["replay_s"] > 0
    hollow = _traces(*((case, {**trace, "events": []}) for case, trace in correct.traces.calls))
    found = evaluator.replayer.run(task, judge, task.start_source, hollow)
    first = hollow.calls[0][0]
    assert found.failure is not None and found.failure.stage == "call", found
    assert f"({first['split']} shape {first['shape']} {first['dtype']})" in found.failure.reason
    assert "replay_s" in found.phases  # the child answered: its time is on the record
