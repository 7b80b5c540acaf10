"""fitness/engine/trials.py: the trial budget, and the TimingResult a timing that checked out makes
of its rows (no child: the rows and plans as the measuring turn leaves them)."""
import time

from fitness.common.flags import Flag
from fitness.common.timing_row import TimingRow
from fitness.engine.trials import TimingResult, TrialBudget, timed_result
from tests.timing_rows import timing_row


def _row(trials: int, spread: float = 0.005, kept: bool = False) -> TimingRow:
    return timing_row({"M": 4}, candidate_ms=0.5, baseline_ms=1.0, trials=trials, baseline_kept=kept,
                      candidate_spread=spread, baseline_spread=0.005)


def test_every_shape_runs_the_fewest_trials_asked_but_never_fewer_than_two():
    assert TrialBudget(21, 7, 300.0).enough == 7
    assert TrialBudget(5, 7, 300.0).enough == 5  # never more than the most
    assert TrialBudget(1, 1, 300.0).enough == 2  # the checked trial and one more


def test_a_timing_that_checked_out_is_a_record_of_its_rows_speedup_phases_and_flags_in_order():
    now = time.monotonic()
    plans = [{"turn_s": {"trials": 0.2}, "prepare_s": {"replay": 0.1}, "busy_unverified": "no NVML"}, {}]
    found = timed_result(plans, [_row(7, spread=0.2), _row(9, kept=True)], [now - 3, now - 2, now - 1, now], None,
                         floor=True)
    assert isinstance(found, TimingResult) and found.timed and found.failure is None
    assert found.speedup == 2.0 and [r.speedup for r in found.times] == [2.0, 2.0]
    assert found.flags == (Flag.GPU_IDLE_UNVERIFIED, Flag.NOISY_TIMING)
    assert found.timing.startswith("median of 7-9 trials per shape") and "on 1 of 2 shapes" in found.timing
    assert found.timing.endswith("no NVML: nothing shows the GPU was idle but for the two sides, so the baseline's "
                                 "kept trials were not reused")
    assert found.phases["turn"] == {"trials": 0.2} and found.phases["timing_exclusive_s"] == 1.0
