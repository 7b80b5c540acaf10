"""fitness/judges.py: what each kind of task decides, without a worker."""
from fitness.evaluator import EvalConfig, Evaluator
from fitness.judges import FunctionJudge, ScriptJudge, judge_for
from fitness.static_gate import allowance
from fitness.verdict import Verdict
from suites.tritonbench import load as load_tritonbench
from tests.suite_fixtures import write_tritonbench


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
