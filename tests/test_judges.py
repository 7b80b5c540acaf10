"""fitness/engine/judges.py: what each kind of task decides, without a worker."""
from fitness.common.flags import Flag
from fitness.engine.evaluator import EvalConfig, Evaluator
from fitness.engine.judges import FunctionJudge, ScriptJudge, judge_for
from fitness.engine.static_gate import allowance
from fitness.engine.verdict import Verdict, biased_aa, untimeable_start
from suites.tritonbench import load as load_tritonbench
from tests.suite_fixtures import write_tritonbench
from tests.timing_rows import timing_row


class _Engine:
    """What a judge reads of the evaluator, for a judge that is never asked to run anything."""
    def __init__(self, baseline="reference", seeds=(0, 1)):
        self.config = EvalConfig(baseline=baseline, seeds=seeds)
        self.interpret = True
        self.gpu = False


def test_a_function_task_draws_fresh_seeds_and_heldout_shapes_for_every_evaluation(builtin):
    judge = FunctionJudge(_Engine(), builtin["softmax"])
    (first, _), (second, _) = judge.cases(Verdict(task="softmax")), judge.cases(Verdict(task="softmax"))
    assert {c["split"] for c in first} == {"tuning", "heldout"}
    assert not {c["seed"] for c in first} & {c["seed"] for c in second}
    tuning = [c for c in first if c["split"] == "tuning"]
    assert len(tuning) == 2 * len(builtin["softmax"].shape_set(True).tuning) * len(builtin["softmax"].dtypes)


def test_each_kind_names_its_baseline_and_what_is_timed(builtin, tmp_path):
    assert FunctionJudge(_Engine(), builtin["softmax"]).baseline_name == "the PyTorch reference"
    start = FunctionJudge(_Engine(baseline="start"), builtin["softmax"])
    assert start.baseline_source() == builtin["softmax"].start_source
    task = next(iter(load_tritonbench(str(write_tritonbench(tmp_path))).values()))
    script = judge_for(_Engine(), task)
    assert isinstance(script, ScriptJudge) and script.timed_split == "timing" and not script.replays
    assert script.baseline_name == task.script.baseline_name and script.baseline_source() is None
    assert script.allowance() == allowance(task.script.reference_source)
    assert isinstance(judge_for(_Engine(), builtin["softmax"]), FunctionJudge)


def test_the_evaluator_keeps_one_judge_per_task(builtin):
    with Evaluator(EvalConfig(workers=1, sandbox=False)) as ev:
        assert ev.judge(builtin["softmax"]) is ev.judge(builtin["softmax"])


def test_an_evaluation_of_the_baselines_own_code_is_known_to_be_an_a_a(builtin, tmp_path):
    softmax = builtin["softmax"]
    assert not FunctionJudge(_Engine(), softmax).is_baseline(softmax.start_source)  # torch is the baseline
    assert FunctionJudge(_Engine(baseline="start"), softmax).is_baseline(softmax.start_source)
    task = next(iter(load_tritonbench(str(write_tritonbench(tmp_path))).values()))
    script = judge_for(_Engine(), task)
    assert script.is_baseline(task.start_source) and not script.is_baseline(task.start_source + "\n# edited\n")


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
