"""Every report metric against values computed by hand."""
import math

import pytest

from archives import analysis
from archives import metrics as m
from archives.records import Candidate, Evaluation
from evolve.export import choose
from tests.timing_rows import timing_row


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 2 / 5),            # 1 - C(3,1)/C(5,1) = 1 - 3/5
    (5, 2, 2, 1 - 3 / 10),       # 1 - C(3,2)/C(5,2)
    (5, 2, 3, 1 - 1 / 10),       # 1 - C(3,3)/C(5,3)
    (5, 2, 4, 1.0),              # n - c < k: every draw of 4 holds a success
    (5, 2, 5, 1.0),
    (5, 0, 1, 0.0),
    (5, 0, 5, 0.0),
    (5, 5, 1, 1.0),
    (10, 3, 5, 1 - 21 / 252),    # C(7,5) = 21, C(10,5) = 252
    (10, 1, 10, 1.0),
    (4, 1, 2, 1 - 3 / 6),
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert m.pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_each_k_on_its_own():
    # the same data asked in any order gives the same answers: no sums carried from one k to the next
    forward = [m.pass_at_k(10, 3, k) for k in (1, 2, 5, 10)]
    backward = [m.pass_at_k(10, 3, k) for k in (10, 5, 2, 1)][::-1]
    assert forward == backward
    assert forward == pytest.approx([0.3, 1 - 21 / 45, 1 - 21 / 252, 1.0])


def test_pass_at_k_undefined_for_k_over_n_and_bad_input():
    assert m.pass_at_k(2, 1, 5) is None and m.pass_at_k(2, 1, 10) is None
    with pytest.raises(ValueError):
        m.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        m.pass_at_k(3, 1, 0)


def test_pass_at_k_matches_exact_binomials_on_large_n():
    n, c = 200, 7
    for k in (1, 2, 5, 10):
        assert m.pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)


def test_geomean_mean_median_with_a_failed_task():
    tasks = [(True, 2.0), (True, 8.0), (False, None)]  # the failed task counts 1.0
    s = m.speedup_stats(tasks)
    assert s["geomean"] == pytest.approx(16 ** (1 / 3))  # (2 * 8 * 1) ** (1/3) = 2.5198
    assert s["mean"] == pytest.approx(11 / 3)
    assert s["median"] == 2.0 and s["n"] == 3


def test_untimed_correct_task_is_left_out_and_no_timing_means_na():
    s = m.speedup_stats([(True, 4.0), (True, None), (False, None)])
    assert s["geomean"] == pytest.approx(2.0) and s["n"] == 2  # sqrt(4 * 1)
    assert m.speedup_stats([(True, None), (False, None)]) == {"geomean": None, "mean": None, "median": None, "n": 0}
    assert m.geomean([]) is None and m.mean([]) is None and m.median([]) is None
    with pytest.raises(ValueError):
        m.geomean([1.0, 0.0])


def test_fast_p_kernelbench_definition():
    tasks = [(True, 2.5), (True, 1.2), (True, 0.8), (False, None), (True, None)]
    assert m.fast_p(tasks, 0.0) == pytest.approx(4 / 5)  # correct, timed or not
    assert m.fast_p(tasks, 1.0) == pytest.approx(2 / 5)
    assert m.fast_p(tasks, 1.5) == pytest.approx(1 / 5)
    assert m.fast_p(tasks, 2.0) == pytest.approx(1 / 5)
    assert m.fast_p(tasks, 2.5) == 0.0  # strictly faster
    assert m.fast_p([(True, None)], 1.0) is None and m.fast_p([(True, None)], 0.0) == 1.0
    assert m.fast_p([], 0.0) is None


def test_sol_fraction_and_achieved_rates():
    rows = [timing_row({"N": 1}, candidate_ms=1.0, floor_ms=0.5, bytes=2e9, flops=0),
            timing_row({"N": 2}, candidate_ms=2.0, floor_ms=0.25, bytes=2e9, flops=4e12)]
    assert m.sol_fraction(rows) == pytest.approx(math.sqrt(0.5 * 0.125))
    a = m.achieved(rows)
    assert a["GBps"] == pytest.approx(math.sqrt(2000 * 1000)) and a["TFLOPs"] is None  # first shape has no FLOPs
    assert m.sol_fraction([timing_row({"N": 1}, candidate_ms=1.0, floor_ms=0.0)]) is None  # no peaks measured
    # 4e9 FLOPs in 2 ms = 2e12 FLOP/s
    assert m.achieved([timing_row({"N": 1}, candidate_ms=2.0, bytes=0, flops=4e9)]) == \
        {"GBps": None, "TFLOPs": pytest.approx(2.0)}


def _row(i, island, gen, stage, correct=False, heldout=False, speedup=None, op="knob_mutation", evaluated=True):
    evaluation = Evaluation(i, stage, correct, heldout, correct and heldout, speedup, "", "gpu") if evaluated else None
    return Candidate(i, 1, "t", island, gen, f"src{i}", f"h{i}", (), op, "", evaluation=evaluation)


def test_best_kernel_follows_the_export_rule():
    rows = [_row(1, -1, 0, "timed", True, True, 1.0, "start"), _row(2, 0, 1, "timed", True, False, 3.0),
            _row(3, 1, 1, "timed", True, True, 1.5), _row(4, 1, 2, "timed", True, True, 1.5),
            _row(5, 0, 2, "call")]
    best = m.best_kernel(rows, need_heldout=True)
    assert best.id == 3  # 3.0 failed held-out; ties go to the oldest
    assert choose(rows) == (best, [rows[1]])  # the export picks by the same rule, and names what it passed over
    assert m.best_kernel(rows, need_heldout=False).id == 2
    assert m.best_kernel([_row(1, 0, 0, "compile")], True) is None


def test_task_summary_accuracies_pass_at_k_and_generalization():
    rows = [_row(1, -1, 0, "timed", True, True, 1.0, "start"),
            _row(2, 0, 1, "timed", True, False, 3.0),     # fastest on tuning shapes, fails held-out
            _row(3, 0, 1, "timed", True, True, 1.5),
            _row(4, 1, 1, "compile"), _row(5, 2, 1, "call"),
            _row(6, 2, 2, "none", evaluated=False)]
    t = analysis.task_summary(rows, islands=3)
    assert (t["generated"], t["pending"]) == (4, 1)  # the start is not generated
    assert t["call_accuracy"] == pytest.approx(3 / 4) and t["exec_accuracy"] == pytest.approx(2 / 4)
    assert t["islands_correct"] == 1
    assert t["pass_at_k"] == {1: pytest.approx(1 / 3), 2: pytest.approx(2 / 3), 5: None, 10: None}
    assert t["best"]["id"] == 3 and t["speedup"] == 1.5 and t["vs_start"] == 1.5
    assert t["search_pick"]["id"] == 2 and t["generalizes"] is False
    assert t["heldout_of_tuning_correct"] == 1 and t["tuning_correct_generated"] == 2


def test_group_summary_means_pass_at_k_over_tasks_without_carrying_sums():
    a = analysis.task_summary([_row(1, 0, 0, "timed", True, True, 2.0), _row(2, 1, 0, "compile"),
                               _row(3, 2, 0, "compile"), _row(4, 3, 0, "compile")], islands=4)
    b = analysis.task_summary([_row(5, 0, 0, "compile"), _row(6, 1, 0, "call")], islands=4)
    g = analysis.group_summary([a, b])
    # task a: n=4, c=1: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1/2; task b: 0, 0
    assert g["pass_at_k"][1] == pytest.approx(0.125) and g["pass_at_k"][2] == pytest.approx(0.25)
    assert g["pass_at_k"][5] is None
    assert g["speedup"]["geomean"] == pytest.approx(math.sqrt(2.0))  # b failed: 1.0
    assert g["fast_p"][1.0] == 0.5 and g["fast_p"][2.0] == 0.0
    assert g["exec_accuracy"] == pytest.approx((1 / 4 + 0) / 2)
    assert g["exec_accuracy_pooled"] == pytest.approx(1 / 6)
    assert g["call_accuracy"] == pytest.approx((1 / 4 + 1 / 2) / 2)


def test_session_rates_by_hand():
    from archives.metrics import session_rates

    r = session_rates(evaluations=30, wall_s=60.0, workers=2, correctness_busy_s=90.0, timing_busy_s=48.0)
    assert r == {"per_min": 30.0, "timing_busy": 0.8, "correctness_busy": 0.75}
    assert session_rates(5, 0.0, 0, 0.0, None)["timing_busy"] is None  # no GPU; no division by zero
