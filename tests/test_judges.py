"""fitness/engine/judges.py: what each kind of task decides, without a worker: each judge handed
only the stage settings and its oracle (the engine's reference, or the suite's kernel's results)."""
import torch

from fitness.common.flags import Flag
from fitness.common.reference import ReferenceCache, compute
from fitness.common.replies import CaseRan
from fitness.engine.evaluator import EvalConfig, Evaluator
from fitness.engine.judges import FunctionJudge, ScriptJudge, judge_for
from fitness.engine.outputs import EngineOracle
from fitness.engine.script_eval import ScriptReference, ScriptReferences
from fitness.engine.settings import StageSettings
from fitness.engine.static_gate import allowance
from fitness.engine.verdict import Failure, Verdict, biased_aa, untimeable_start
from suites.tritonbench import load as load_tritonbench
from tests.suite_fixtures import write_tritonbench
from tests.timing_rows import timing_row


def function_judge(task, baseline="reference", seeds=(0, 1)) -> FunctionJudge:
    """A task's judge on the interpreter's settings, its oracle the engine's reference computed here."""
    return FunctionJudge(task, StageSettings(seeds=seeds, baseline=baseline), EngineOracle(ReferenceCache()))


def _judge_for(task, baseline="reference"):
    return judge_for(task, StageSettings(baseline=baseline), EngineOracle(ReferenceCache()),
                     ScriptReferences(None, (0, 1), True, 10.0, StageSettings().task_spec))


def test_a_function_task_draws_fresh_seeds_and_heldout_shapes_for_every_evaluation(builtin):
    judge = function_judge(builtin["softmax"])
    (first, _), (second, _) = judge.cases(), judge.cases()
    assert {c["split"] for c in first} == {"tuning", "heldout"}
    assert not {c["seed"] for c in first} & {c["seed"] for c in second}
    tuning = [c for c in first if c["split"] == "tuning"]
    assert len(tuning) == 2 * len(builtin["softmax"].shape_set(True).tuning) * len(builtin["softmax"].dtypes)


def test_each_kind_names_its_baseline_and_what_is_timed(builtin, tmp_path):
    assert function_judge(builtin["softmax"]).baseline_name == "the PyTorch reference"
    start = function_judge(builtin["softmax"], baseline="start")
    assert start.baseline_source() == builtin["softmax"].start_source
    task = next(iter(load_tritonbench(str(write_tritonbench(tmp_path))).values()))
    script = _judge_for(task)
    # under the interpreter a benchmark call is replayed here; on a GPU the timing replays them
    assert isinstance(script, ScriptJudge) and script.timed_split == "timing" and script.replays
    on_gpu = judge_for(task, StageSettings(gpu=True, interpret=False), EngineOracle(ReferenceCache()),
                       ScriptReferences(None, (0, 1), False, 10.0, StageSettings().task_spec))
    assert not on_gpu.replays
    assert script.baseline_name == task.script.baseline_name and script.baseline_source() is None
    assert script.allowance() == allowance(task.script.reference_source)
    assert isinstance(_judge_for(builtin["softmax"]), FunctionJudge)


def test_the_evaluator_keeps_one_judge_per_task(builtin):
    with Evaluator(EvalConfig(workers=1, sandbox=False)) as ev:
        assert ev.judge(builtin["softmax"]) is ev.judge(builtin["softmax"])


def test_an_evaluation_of_the_baselines_own_code_is_known_to_be_an_a_a(builtin, tmp_path):
    softmax = builtin["softmax"]
    assert not function_judge(softmax).is_baseline(softmax.start_source)  # torch is the baseline
    assert function_judge(softmax, baseline="start").is_baseline(softmax.start_source)
    task = next(iter(load_tritonbench(str(write_tritonbench(tmp_path))).values()))
    script = _judge_for(task)
    assert script.is_baseline(task.start_source) and not script.is_baseline(task.start_source + "\n# edited\n")


def test_a_function_judge_checks_outputs_against_the_engine_s_reference_and_names_what_is_wrong(builtin):
    task = builtin["softmax"]
    cases, check = function_judge(task).cases()
    case = cases[0]
    right = [r.to(getattr(torch, case["dtype"])) for r in compute(task, case)[0]]
    assert check(case, CaseRan(outputs=tuple(right))) == ""
    assert "outside tolerance" in check(case, CaseRan(outputs=tuple(torch.zeros_like(o) for o in right)))
    assert check(case, CaseRan()) == "no outputs returned"


def test_a_script_task_whose_reference_fails_here_plans_no_cases_but_a_failure_that_marks_it_invalid(tmp_path):
    task = next(iter(load_tritonbench(str(write_tritonbench(tmp_path))).values()))
    refs = ScriptReferences(None, (0, 1), True, 10.0, StageSettings().task_spec)
    refs._items[task.name] = ScriptReference(error="the suite's test raised here")  # as its computing found
    judge = ScriptJudge(task, StageSettings(), refs)
    assert judge.cases() == Failure("the suite's test raised here", "parse", (Flag.INVALID_HERE,))
    assert judge.status() == "the suite's test raised here"


def _timed(speedup: float, baseline_ms: float, candidate_ms: float) -> Verdict:
    row = timing_row({"perf": 0}, "given", candidate_ms, baseline_ms, method="eager")
    return Verdict(task="t", stage="timed", correct=True, heldout_correct=True, speedup=speedup, times=[row])


def test_an_a_a_timed_far_from_parity_fails_as_untimeable_and_says_which_side_did_more():
    v = _timed(23.66, 4.6253, 0.2242)  # H100, TritonBench cross_entropy2: its wrapper prints its outputs
    biased_aa(v)
    assert not v.passed and v.speedup is None and {Flag.TIMING_FAILED, Flag.TIMING_BIASED} <= set(v.flags)
    assert "measured 23.66x" in v.reason and "the baseline 4.625 ms, its replayed kernels 0.224 ms" in v.reason
    assert untimeable_start(v.flags, v.reason).startswith(
        "its starting kernel cannot be timed here: timing: the baseline's own code, timed against itself")
    named = _timed(23.66, 4.6253, 0.2242)
    biased_aa(named, "def cross_entropy_fwd(logits):\n    loss = logits.sum()\n    print(loss)\n    return loss\n")
    assert named.reason.endswith("in the baseline's own code, it prints inside cross_entropy_fwd (line 3)")
    for noise in (1.03, 0.97, 1.2):  # A/A noise, even far past what a loaded GPU shows, stays a timing
        v = _timed(noise, 1.0, 1.0 / noise)
        biased_aa(v)
        assert v.passed and v.speedup == noise and not v.flags
