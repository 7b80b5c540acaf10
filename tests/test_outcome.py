"""fitness/engine/outcome.py: the verdict made, in one place, from the records the stages return
(real records, as the stages make them; no worker runs here)."""
from dataclasses import replace

from fitness.common.flags import Flag
from fitness.engine.correctness import CorrectnessResult, Traces
from fitness.engine.outcome import CleanChild, Evaluation, reference_verdict, task_code_verdict, verdict_from
from fitness.engine.replay import ReplayResult
from fitness.engine.trials import TimingResult
from fitness.engine.verdict import TASK_CODE_RAISED, Failure
from tests.timing_rows import timing_row

CASES = ({"split": "tuning", "shape": {"M": 4}, "dtype": "float32", "seed": 1, "ok": True, "error": ""},
         {"split": "heldout", "shape": {"M": 8}, "dtype": "float32", "seed": 2, "ok": True, "error": ""})
RIGHT = CorrectnessResult("correct", CASES, Traces(), None, True, True, "cpu (Triton interpreter)", "bwrap; fresh",
                          {"worker_s": 0.5})
ROW = timing_row({"M": 4}, candidate_ms=0.5, baseline_ms=1.0)
TIMED = TimingResult(timing="median of 7 trials per shape", flags=(Flag.NOISY_TIMING,), times=(ROW,), speedup=2.0,
                     phases={"timing_exclusive_s": 0.1}, timed=True)


def _evaluation(**found) -> Evaluation:
    return Evaluation("softmax", "bubblewrap", "the PyTorch reference", **found)


def test_a_source_the_gate_refuses_stops_at_stage_none_with_only_the_gate_s_reason():
    v = verdict_from(_evaluation(flags=(Flag.NO_SANDBOX,), gate=Failure("static gate: no kernel", "none")), 0.25)
    assert (v.stage, v.reason, v.flags) == ("none", "static gate: no kernel", [Flag.NO_SANDBOX])
    assert v.cases == [] and v.device == ""
    assert v.sandbox == "bubblewrap" and v.elapsed_s == 0.25 and not v.passed


def test_a_candidate_that_passes_on_cpu_says_what_it_passed_and_that_it_was_not_timed():
    v = verdict_from(_evaluation(correctness=RIGHT, replay=ReplayResult(phases={"replay_s": 0.2}), replayed="3 calls"))
    assert v.passed and v.stage == "correct" and v.flags == [Flag.UNTIMED_NO_GPU]
    assert v.reason == ("passed 2 correctness cases (1 held-out); 3 calls; not timed: no GPU here; correctness ran "
                        "under the Triton interpreter on CPU")
    assert v.sandbox == "bwrap; fresh" and v.device == "cpu (Triton interpreter)"
    assert v.phases == {"worker_s": 0.5, "replay_s": 0.2}


def test_a_failed_replay_names_the_call_and_stops_the_cascade_correct_on_nothing():
    failed = ReplayResult(Failure("replay: wrong result (tuning shape {'M': 4} float32)", "call"), {"replay_s": 0.1})
    v = verdict_from(_evaluation(correctness=RIGHT, replay=failed, replayed="3 calls"))
    assert (v.stage, v.correct, v.heldout_correct, v.passed) == ("call", False, False, False)
    assert v.reason == "replay: wrong result (tuning shape {'M': 4} float32)" and v.flags == []
    assert v.cases == list(CASES)  # what correctness found stays on the record


def test_a_held_out_failure_goes_on_to_the_timing_keeps_its_reason_and_does_not_pass():
    heldout = CorrectnessResult("correct", CASES, Traces(), Failure("heldout case {'M': 8}: crashed", "correct"),
                                True, False)
    v = verdict_from(_evaluation(gpu=True, correctness=heldout, replay=ReplayResult(), timing=TIMED))
    assert v.stage == "timed" and v.speedup == 2.0 and v.correct and not v.heldout_correct and not v.passed
    assert v.reason == "heldout case {'M': 8}: crashed" and v.flags == [Flag.NOISY_TIMING]


def test_a_failed_timing_makes_no_parent_at_the_stage_the_candidate_reached():
    failed = TimingResult(failure=Failure("timing: the replayed kernels: hang", "correct",
                                          (Flag.TIMING_FAILED, Flag.WORKER_REPLACED)))
    v = verdict_from(_evaluation(gpu=True, correctness=RIGHT, replay=ReplayResult(), timing=failed))
    assert (v.stage, v.correct, v.heldout_correct) == ("correct", False, True)
    assert v.reason == "timing: the replayed kernels: hang" and v.flags == [Flag.TIMING_FAILED, Flag.WORKER_REPLACED]
    assert v.speedup is None and v.times == [] and v.timing == ""


def test_the_clean_child_frames_both_stages_phases_and_losing_it_fails_the_candidate_last():
    lost = CleanChild(0.01, 2.5, Failure("replay: the child died", "call", (Flag.WORKER_REPLACED,)))
    v = verdict_from(_evaluation(gpu=True, correctness=RIGHT, replay=ReplayResult(phases={"replay_s": 0.3}),
                                 timing=TIMED, clean=lost))
    assert list(v.phases) == ["worker_s", "clean_wait_s", "replay_s", "timing_exclusive_s", "clean_held_s"]
    assert (v.stage, v.correct, v.reason) == ("call", False, "replay: the child died")
    assert v.flags == [Flag.NOISY_TIMING, Flag.WORKER_REPLACED] and v.times == [ROW]  # the timing's rows stay


def test_an_a_a_timing_far_from_parity_fails_as_biased_only_when_the_baseline_s_own_code_was_timed():
    aa = TimingResult(timing="median", times=(replace(ROW, candidate_ms=0.1),), speedup=10.0, timed=True)
    plain = verdict_from(_evaluation(gpu=True, correctness=RIGHT, replay=ReplayResult(), timing=aa))
    assert plain.passed and plain.speedup == 10.0
    v = verdict_from(_evaluation(gpu=True, correctness=RIGHT, replay=ReplayResult(), timing=aa, aa_source="x = 1"))
    assert not v.passed and v.stage == "correct" and v.speedup is None and "measured 10.00x" in v.reason
    assert v.flags == [Flag.TIMING_FAILED, Flag.TIMING_BIASED]


def test_a_script_task_whose_reference_fails_here_is_invalid_here_on_the_pool_s_device():
    invalid = CorrectnessResult("parse", failure=Failure("the suite's test raised", "parse", (Flag.INVALID_HERE,)),
                                device="cpu")
    v = verdict_from(_evaluation(flags=(Flag.AA_SENTINEL,), correctness=invalid))
    assert (v.stage, v.reason, v.device, v.sandbox) == ("parse", "the suite's test raised", "cpu", "bubblewrap")
    assert v.flags == [Flag.AA_SENTINEL, Flag.INVALID_HERE] and not v.passed


def test_a_task_whose_reference_runs_here_is_valid_without_a_kernel_to_time():
    v = reference_verdict(_evaluation(flags=(Flag.NO_SANDBOX,)), "cpu", "")
    assert (v.stage, v.correct, v.heldout_correct, v.device) == ("correct", True, True, "cpu")
    assert "the reference runs here" in v.reason and v.flags == [Flag.NO_SANDBOX] and v.speedup is None


def test_a_task_whose_reference_cannot_run_here_is_invalid_here_and_says_why():
    v = reference_verdict(_evaluation(), "cpu", "the reference needs CUDA")
    assert not v.passed and v.reason == "the reference needs CUDA" and v.flags == [Flag.INVALID_HERE]
    assert v.sandbox == "bubblewrap" and v.baseline == "the PyTorch reference"


def test_a_task_whose_own_code_raised_fails_with_the_error_not_as_invalid_here():
    v = task_code_verdict(_evaluation(), "cpu", "ValueError: shape")
    assert not v.passed and v.reason == f"{TASK_CODE_RAISED}: ValueError: shape" and v.flags == []
