"""The check after the measuring turn (fitness.engine.replay_check): check_outputs and unwritten_as."""
import pytest
import torch

from fitness.clean.timing_plan import fresh_seed_of
from fitness.engine.replay_check import check_outputs, unwritten_as
from fitness.engine.trials import TimingRejected

CASE = {"split": "tuning", "shape": {"M": 4, "N": 8}, "dtype": "float32"}
SEEDS = [10, 11, 12, 13, 14]


class _Judge:
    """The judge's one call here (check_timed), noted; answers a problem for the seeds in `wrong`."""

    def __init__(self, wrong: tuple[int, ...] = ()) -> None:
        self.calls: list[tuple] = []
        self.wrong = wrong

    def check_timed(self, case, seed, candidate, baseline) -> str:
        self.calls.append((case, seed, candidate, baseline))
        return f"output 0 differs at seed {seed}" if seed in self.wrong else ""


def _plan(rot: int, picks: list[int], n_sets: int = 2, **extra) -> dict:
    return {"check": (rot, picks), "epoch": {"seeds": list(SEEDS)}, "n_sets": n_sets, "case": dict(CASE), **extra}


def _outs(n: int) -> list:
    return [[torch.full((2,), float(i))] for i in range(n)]


# -- check_outputs ------------------------------------------------------------------------------------
def test_each_checked_output_is_judged_on_the_seed_its_set_held_in_the_checked_trial():
    judge = _Judge()
    outs = _outs(2)
    check_outputs(judge, _plan(rot=2, picks=[0, 2]), outs)
    # 2 sets over 5 seeds: 3 draws; set 0 held draw 2, set 2 held draw (2 + 2) % 3 = 1
    assert [c[1] for c in judge.calls] == [12, 11]
    assert all(c[0] == CASE and c[3] is None for c in judge.calls)
    assert [c[2] for c in judge.calls] == outs


def test_the_draws_wrap_at_as_many_as_the_engine_has_seeds():
    judge = _Judge()
    check_outputs(judge, _plan(rot=4, picks=[0, 1, 3], n_sets=8), _outs(3))
    assert [c[1] for c in judge.calls] == [14, 10, 12]  # 8 sets over 5 seeds: 5 draws


def test_a_trial_of_fresh_draws_is_judged_on_the_seeds_derived_from_its_key():
    judge = _Judge()
    check_outputs(judge, _plan(rot=1, picks=[0, 3], n_sets=4, check_key=987), _outs(2))
    assert [c[1] for c in judge.calls] == [fresh_seed_of(987, 0), fresh_seed_of(987, 3)]
    assert not {c[1] for c in judge.calls} & set(SEEDS)


def test_a_replay_that_kept_another_number_of_outputs_than_were_picked_is_rejected_unjudged():
    judge = _Judge()
    with pytest.raises(TimingRejected, match="kept 1 checked outputs, not 2: no timed trial of it was checked"):
        check_outputs(judge, _plan(rot=0, picks=[0, 1]), _outs(1))
    assert judge.calls == []


def test_a_wrong_checked_output_rejects_the_timing_naming_its_input_set_and_the_problem():
    judge = _Judge(wrong=(11,))
    with pytest.raises(TimingRejected) as e:
        check_outputs(judge, _plan(rot=0, picks=[0, 1, 2], n_sets=3), _outs(3))
    assert "checked unannounced, gave a wrong result (input set 1): output 0 differs at seed 11" in str(e.value)
    assert len(judge.calls) == 2  # the first wrong one decides


def test_with_the_baseline_as_oracle_its_unwritten_memory_is_taken_from_the_baseline():
    judge = _Judge()
    zero = [torch.tensor([1.0, 2.0, 0.0, 0.0])]
    full = [torch.tensor([1.0, 2.0, float("nan"), -1.0])]  # the last two: left as the baseline found them
    cand = [torch.tensor([1.0, 2.0, 7.0, 8.0])]
    check_outputs(judge, _plan(rot=0, picks=[1], oracle=[(zero, full)]), [cand])
    ((case, seed, got, baseline),) = judge.calls
    assert seed == 11 and baseline is zero
    assert torch.equal(got[0], torch.tensor([1.0, 2.0, 0.0, 0.0]))


# -- unwritten_as -------------------------------------------------------------------------------------
def test_elements_written_alike_on_both_fills_stay_the_candidate_s_and_the_others_are_the_baseline_s():
    zero = [torch.tensor([[0, 5], [0, 9]], dtype=torch.int32)]
    full = [torch.tensor([[-1, 5], [-1, 9]], dtype=torch.int32)]
    cand = [torch.tensor([[3, 4], [6, 8]], dtype=torch.int32)]
    assert torch.equal(unwritten_as(cand, zero, full)[0], torch.tensor([[0, 4], [0, 8]], dtype=torch.int32))


def test_a_nan_the_baseline_wrote_on_both_fills_counts_as_written():
    zero = [torch.tensor([float("nan"), 1.0], dtype=torch.float16)]
    full = [torch.tensor([float("nan"), 2.0], dtype=torch.float16)]
    out = unwritten_as([torch.tensor([5.0, 6.0], dtype=torch.float16)], zero, full)[0]
    assert torch.equal(out, torch.tensor([5.0, 1.0], dtype=torch.float16))


def test_a_sign_of_zero_that_differs_between_fills_marks_the_element_unwritten():
    zero, full = [torch.tensor([0.0, 3.0])], [torch.tensor([-0.0, 3.0])]  # equal as numbers, not as bits
    assert torch.equal(unwritten_as([torch.tensor([9.0, 4.0])], zero, full)[0], torch.tensor([0.0, 4.0]))


def test_flags_and_non_contiguous_outputs_are_compared_element_by_element():
    zero = [torch.tensor([False, True, False])]
    full = [torch.tensor([True, True, False])]
    assert torch.equal(unwritten_as([torch.tensor([False, False, True])], zero, full)[0],
                       torch.tensor([False, False, True]))
    z = torch.tensor([[0.0, 1.0], [0.0, 2.0]]).T  # a transposed output: its rows are the stored columns
    f = torch.tensor([[9.0, 1.0], [9.0, 2.0]]).T
    c = torch.tensor([[5.0, 6.0], [7.0, 8.0]])
    assert torch.equal(unwritten_as([c], [z], [f])[0], torch.tensor([[0.0, 0.0], [7.0, 8.0]]))


def test_outputs_the_baseline_s_do_not_match_are_left_as_the_candidate_gave_them():
    c = [torch.ones(4), torch.ones(4), torch.ones(4, dtype=torch.float64), 3, torch.ones(4)]
    zero = [torch.zeros(5), torch.zeros(4), torch.zeros(4), torch.zeros(4)]
    full = [torch.full((5,), 2.0), torch.full((3,), 2.0), torch.full((4,), 2.0), torch.full((4,), 2.0)]
    out = unwritten_as(c, zero, full)
    assert len(out) == 5 and all(o is x for o, x in zip(out, c))  # shapes, dtype, a number, no baseline output
