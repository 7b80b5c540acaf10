"""Issue 39, classes 3 and 6, on CPU: timing that cannot be memoized (which draw each input set
holds, fresh output bytes before every pass, the unannounced checked trial, calibration on
distinct draws) and a baseline whose measurement is verified (re-measured when it drifts, the
GPU's other processes read through a stand-in for NVML). TimedSide runs its eager path on the
CPU; the measuring turn runs with the stand-in children of tests/test_timing_schedule.py."""
import pytest
import torch

import fitness.engine.measuring as measuring
from fitness.clean.timing import TimedSide, assignment, draws_for, scramble_targets
from fitness.common.messages import TrialCheck
from fitness.engine.gpu_busy import BusyProbe, Sample, busy_note
from fitness.engine.measuring import TRIAL_REPS, unwritten_as
from fitness.engine.trials import Draws, check_plan
from fitness.engine.verdict import Verdict
from tests.test_timing_schedule import CASE, StandIn, stand_in_evaluator, timed_verdict


def _draws(n: int, size: int = 64) -> list[tuple]:
    return [(torch.full((size,), float(k)),) for k in range(n)]


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


# -- which draw each set holds -----------------------------------------------------------------
def test_every_set_of_a_region_holds_its_own_draw_and_a_new_one_each_trial():
    side = TimedSide(_double, _draws(4), n_seeds=9, more=lambda k: (torch.full((64,), float(k)),))
    side.calibrate()
    side.prepare(8, graph=False)
    assert len(side.draws) == draws_for(8, 9) == 9  # one per set and one over, drawn as the sets need them
    before = None
    for rot in (3, 7, 0):
        side.trial(rot)
        held = [int(s[0][0]) for s in side.sets]
        assert held == assignment(8, 9, rot) and len(set(held)) == 8
        if before is not None:
            assert all(a != b for a, b in zip(held, before))  # no set keeps the draw it held
        before = held


def test_the_engine_never_repeats_a_side_s_rotation_and_keeps_the_checked_one_for_its_trial():
    d = Draws(n=5, check_rot=2, picks=[0, 3], check_at=4)
    rots, checks = [], []
    for first in range(0, 9, 3):
        msg = d.request("c", first, 3)
        rots += msg["rots"]
        checks.append(msg.get("check"))
    assert rots[4] == 2 and [r for i, r in enumerate(rots) if i != 4].count(2) == 0
    assert all(a != b for a, b in zip(rots, rots[1:]))
    assert checks == [None, TrialCheck(rep=1, picks=(0, 3)), None]
    again = d.request("c", 3, 3)  # a second round of trials (a noisy shape): not checked again
    assert "check" not in again and 2 not in again["rots"]
    assert all("check" not in Draws(n=5, check_rot=2, picks=[0], check_at=1).request("b", 0, 3) for _ in range(3))


def test_the_checked_trial_is_drawn_per_epoch_among_all_sets_and_draws():
    seen_rots, seen_mid = set(), set()
    for _ in range(200):
        rot, picks = check_plan(8, 9)
        assert picks[0] == 0 and picks[-1] == 7 and 0 <= rot < 9
        seen_rots.add(rot)
        seen_mid.update(picks)
    assert len(seen_rots) == 9 and len(seen_mid) == 8


# -- fresh output bytes before every pass --------------------------------------------------------
class _OutputMemo:
    """A kernel that remembers: its output is one buffer per input set (as a graph's are, or as
    the allocator hands back), and it skips the work when that buffer already holds the answer."""

    def __init__(self):
        self.bufs: dict[int, torch.Tensor] = {}
        self.computed = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bufs.setdefault(x.data_ptr(), torch.empty_like(x))
        if not torch.equal(out, x * 2):
            out.copy_(x * 2)
            self.computed += 1
        return out


@pytest.mark.parametrize("scrambled", [True, False])
def test_a_kernel_that_finds_its_last_answer_in_its_outputs_computes_every_pass(scrambled, monkeypatch):
    import fitness.clean.timing as timing
    if not scrambled:  # the hole: passes repeat into the same output buffers
        monkeypatch.setattr(timing, "scramble", lambda views: None)
    memo = _OutputMemo()
    side = TimedSide(memo, _draws(5), n_seeds=5)
    side.prepare(4, graph=False)
    memo.computed = 0
    side.trial(1, passes=3)
    assert memo.computed == (12 if scrambled else 4)


def test_scrambling_leaves_out_an_output_that_is_an_input_and_takes_a_storage_once():
    x, y = torch.zeros(8), torch.zeros(16)
    views = scramble_targets([x.view(2, 4), y[:8], y[8:], None], [(x,)])
    assert len(views) == 1 and views[0].numel() == y.numel() * 4


def test_calibration_calls_each_run_on_a_draw_of_their_own():
    seen = []

    def fn(x):
        seen.append(float(x[0]))
        return x + 1
    TimedSide(fn, _draws(4), n_seeds=4).calibrate()
    assert seen == [0.0, 1.0, 2.0, 3.0]


def test_the_checked_trial_keeps_the_outputs_of_the_picked_sets_of_their_draws():
    side = TimedSide(_double, _draws(5), n_seeds=5)
    side.prepare(4, graph=False)
    side.trial(2)
    assert side.held == []  # an ordinary trial keeps nothing
    side.trial(3, passes=2, picks=[0, 3])
    out = side.checked()
    assert [float(o[0][0]) for o in out] == [2.0 * 3, 2.0 * ((3 + 3) % 5)]


def test_an_in_place_side_starts_every_pass_from_the_trial_s_draws_so_the_checked_pass_holds_one_update():
    def bump(x):  # an INPLACE task's call: updates its input and returns it
        return x.add_(1)
    for inplace, want in ((True, [3.0 + 1, (3 + 3) % 5 + 1.0]), (False, [3.0 + 3, (3 + 3) % 5 + 3.0])):
        side = TimedSide(bump, _draws(5), n_seeds=5, inplace=inplace)
        side.prepare(4, graph=False)
        side.trial(3, passes=3, picks=[0, 3])
        assert [float(o[0][0]) for o in side.checked()] == want, inplace
        assert [float(d[0][0]) for d in side.draws] == [0.0, 1.0, 2.0, 3.0, 4.0]  # the draws themselves untouched


def test_the_baseline_s_unwritten_memory_is_no_part_of_what_the_candidate_must_match():
    def half(x):  # leaves the second half of its output as it found it
        out = torch.empty_like(x)
        out[: x.numel() // 2] = x[: x.numel() // 2]
        return out
    side = TimedSide(half, _draws(3, size=8), n_seeds=3)
    side.prepare(2, graph=False)
    ((zero, full),) = side.oracle(1, [1])
    assert torch.equal(zero[0][:4], full[0][:4]) and not torch.equal(zero[0][4:], full[0][4:])
    candidate = [torch.cat([torch.full((4,), 2.0), torch.full((4,), 123.0)])]
    assert torch.equal(unwritten_as(candidate, zero, full)[0], zero[0])
    wrong = [torch.full((8,), 7.0)]
    assert not torch.equal(unwritten_as(wrong, zero, full)[0][:4], zero[0][:4])


# -- the measuring turn: checks, drift, the GPU's other processes ----------------------------------
def _time(e, task, replay) -> Verdict:
    return timed_verdict(e, task, {"k": (CASE, {"trace": "stand-in"})}, replay)


@pytest.fixture()
def ev(builtin):
    with stand_in_evaluator(builtin["softmax"], trials=5) as e:
        yield e


def test_one_trial_per_shape_is_checked_and_where_it_falls_varies(ev, builtin):
    task = builtin["softmax"]
    where = set()
    for _ in range(12):
        replay = StandIn(task)
        assert _time(ev, task, replay).stage == "timed"
        checked = [m for m in replay.trials if m.get("check")]
        assert len({id(m) for m in checked}) == 1
        where.add(next(i for i, m in enumerate(replay.trials) if m.get("check")))
    assert len(where) > 1


def test_a_replay_that_returns_the_last_trial_s_answer_is_refused(ev, builtin):
    task = builtin["softmax"]
    v = _time(ev, task, StandIn(task, stale=True))
    assert v.stage != "timed" and "checked unannounced, gave a wrong result" in v.reason


def test_a_baseline_whose_time_drifts_from_its_kept_trials_is_measured_again(ev, builtin):
    task = builtin["softmax"]
    assert _time(ev, task, StandIn(task)).stage == "timed"
    assert _time(ev, task, StandIn(task)).times[0].baseline_kept
    ev.base.ms = 0.001 * 1.5  # a neighbour slowed the GPU under the baseline
    before = len(ev.base.trials)
    v = _time(ev, task, StandIn(task))
    assert not v.times[0].baseline_kept and len(ev.base.trials) - before > TRIAL_REPS
    assert v.times[0].baseline_ms == pytest.approx(0.0015)
    assert "the baseline strayed over 3% from its kept trials and was measured again" in v.timing


class _Nvml:
    """NVML's stand-in: per call, the samples of other processes it reports."""

    def __init__(self, busy: list[bool], pid: int = 4242):
        self.busy, self.pid, self.calls = list(busy), pid, 0

    def __call__(self, since_us: int) -> list[Sample]:
        self.calls += 1
        on = self.busy.pop(0) if self.busy else False
        return [Sample(self.pid, 90, since_us + 10)] if on else []


def _probe(sampler, tree: dict | None = None, visible: bool = True) -> BusyProbe:
    """A probe over a stand-in NVML and a stand-in process tree (pid -> parent); the engine is 100."""
    tree = tree or {}
    return BusyProbe(sampler, parent=lambda pid: tree.get(pid), visible=lambda pid: visible, engine=100)


def test_a_shape_measured_while_another_process_kept_the_gpu_busy_is_measured_again(ev, builtin):
    task = builtin["softmax"]
    ev.turn.busy = _probe(_Nvml([True, False]))
    v = _time(ev, task, StandIn(task))
    assert v.stage == "timed" and "measured again after the GPU was busy with pid 4242 (SMs 90%)" in v.timing


def test_busy_twice_the_timing_is_refused(ev, builtin):
    task = builtin["softmax"]
    ev.turn.busy = _probe(_Nvml([True, True]))
    v = _time(ev, task, StandIn(task))
    assert v.stage != "timed" and not v.correct
    assert "the GPU was busy with another process while this shape was measured, twice" in v.reason
    ev.turn.busy = _probe(_Nvml([]))
    before = len(ev.base.trials)
    after = _time(ev, task, StandIn(task))  # the busy window's baseline trials were not kept
    assert not after.times[0].baseline_kept and len(ev.base.trials) - before > TRIAL_REPS


def test_the_turn_s_own_children_and_idle_processes_are_not_foreign(ev, builtin):
    task = builtin["softmax"]
    replay = StandIn(task)
    replay.pids = [4242]  # a ChildProcess knows its pids
    ev.turn.busy = _probe(_Nvml([True] * 10, pid=4242))
    assert _time(ev, task, replay).stage == "timed"
    probe = _probe(lambda since: [Sample(1, 2, since + 1), Sample(2, 50, since - 1)])
    assert probe.foreign(100, set()) == []  # 2% busy; a sample from before the window
    assert busy_note([Sample(7, 10, 0), Sample(7, 30, 1), Sample(3, 5, 2)]) == "pid 3 (SMs 5%), pid 7 (SMs 30%)"


def test_where_the_gpu_s_processes_cannot_be_read_the_verdict_says_so_and_keeps_no_baseline(ev, builtin):
    task = builtin["softmax"]

    def missing(since):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")
    ev.turn.busy = BusyProbe(missing)
    first, second = _time(ev, task, StandIn(task)), _time(ev, task, StandIn(task))
    for v in (first, second):
        assert v.stage == "timed" and "gpu-idle-unverified" in v.flags
        assert "could not be read (NVML: libnvidia-ml.so.1" in v.timing and "were not reused" in v.timing
    assert not second.times[0].baseline_kept


def test_nvml_missing_is_a_reason_not_an_error(monkeypatch):
    import fitness.engine.gpu_busy as gpu_busy

    def no_lib():
        raise OSError("no libnvidia-ml here")
    monkeypatch.setattr(gpu_busy, "nvml_sampler", no_lib)
    probe = BusyProbe()
    assert not probe.available() and probe.foreign(0, set()) is None and "no libnvidia-ml here" in probe.reason
    assert measuring.FUNCTION_DRAWS > measuring.SCRIPT_DRAWS >= 3


# -- fresh draws for regions of few sets ------------------------------------------------------------
class _TableMemo:
    """A kernel with a table of every answer it gave, keyed by its input's contents (scratch
    memory of its own, as large as it likes): it computes only what it never saw."""

    def __init__(self):
        self.table: dict[bytes, torch.Tensor] = {}
        self.computed = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        key = x.numpy().tobytes()
        if key not in self.table:
            self.table[key] = x * 2
            self.computed += 1
        return self.table[key].clone()


def _fresh(seed: int) -> tuple:
    return (torch.randn(64, generator=torch.Generator().manual_seed(seed)),)


def test_a_table_of_answers_hits_on_a_rotated_pool_and_never_on_fresh_draws():
    memo = _TableMemo()
    side = TimedSide(memo, _draws(3), n_seeds=3, fresh=_fresh)
    side.prepare(2, graph=False)
    for rot in (0, 1, 2):
        side.trial(rot)
    memo.computed = 0
    side.trial(0)
    side.trial(1)
    assert memo.computed == 0  # a pool is finite: its answers are all in the table
    for key in (11, 12, 13):
        side.trial(0, fresh=key)
    assert memo.computed == 6  # every set of every fresh trial: a draw no trial had


def test_fresh_trials_are_keyed_alike_on_both_sides_and_the_checked_one_is_fresh_too():
    """Were the checked trial on the pool (which the warm-ups show the kernel), a kernel could
    compute only for inputs it has seen and skip the rest: its key is the epoch's, as new as any."""
    from fitness.clean.timing import fresh_seed_of
    d = Draws(n=3, check_rot=1, picks=[0], check_at=2, fresh_base=1000, check_key=77)
    c, b = d.request("c", 0, 3), d.request("b", 0, 3)
    assert c["fresh"] == (1000, 1001, 77) and b["fresh"] == (1000, 1001, 1002)
    assert c["rots"][2] == 1 and c["check"] == TrialCheck(rep=2, picks=(0,))
    assert len({fresh_seed_of(1000, i) for i in range(64)} | {fresh_seed_of(1001, i) for i in range(64)}) == 128
    side = TimedSide(_double, _draws(3), n_seeds=3, fresh=_fresh)
    side.prepare(2, graph=False)
    side.trial(0, fresh=1000)
    assert torch.equal(side.sets[1][0], _fresh(fresh_seed_of(1000, 1))[0])


def test_a_region_of_few_sets_of_a_task_drawn_on_the_gpu_gets_fresh_draws(ev, builtin, monkeypatch):
    import fitness.clean.timing as timing
    task = builtin["softmax"]
    replay = StandIn(task)
    assert _time(ev, task, replay).stage == "timed"
    n = ev.base.sides[next(iter(ev.base.sides))]["n"]
    fresh = [m.get("fresh") for m in replay.trials]
    assert (n <= timing.FRESH_MAX_SETS) == any(f is not None for f in fresh)
    monkeypatch.setattr(measuring, "FRESH_MAX_SETS", 10**6)
    replay = StandIn(task)
    assert _time(ev, task, replay).stage == "timed"
    requests = list({id(m): m for m in replay.trials}.values())  # the stand-in lists a request per trial
    keys = [k for m in requests for k in m["fresh"]]
    assert None not in keys and len(set(keys)) == len(keys)  # the checked trial too; no key twice
    d = Draws(n=3, fresh_base=0)
    assert d.request("c", 0, 3)["fresh"] == (0, 1, 2) and d.request("c", 0, 3)["fresh"] == (3, 4, 5)  # a 2nd round


def test_a_process_the_turn_s_children_started_is_theirs_and_an_orphan_is_not():
    tree = {501: 500, 502: 501, 777: 1}  # 502 a grandchild of the turn's 500; 777 re-parented to init
    probe = _probe(lambda since: [Sample(502, 90, since), Sample(777, 90, since), Sample(500, 60, since)], tree)
    assert [s.pid for s in probe.foreign(0, {500})] == [777]


def test_nvml_pids_that_are_not_this_machine_s_make_the_check_unverifiable_not_a_failure():
    """A container without the host's pid namespace: NVML names host pids, none of them here, and
    the turn's own children (which ran kernels) are not among them."""
    probe = _probe(lambda since: [Sample(90001, 80, since), Sample(90002, 40, since)], visible=False)
    assert probe.foreign(0, {500}) is None and "none of them a process here" in probe.reason
    assert not probe.available()
    ours_seen = _probe(lambda since: [Sample(500, 80, since), Sample(90002, 40, since)], visible=False)
    assert [s.pid for s in ours_seen.foreign(0, {500})] == [90002]  # gone since, but not ours: busy


def test_the_run_s_own_other_processes_at_work_are_noted_and_not_refused(ev, builtin):
    """A correctness child of another candidate (started by the engine) used the GPU meanwhile:
    the engine's own accounting knows it; both sides met it, alternating."""
    task = builtin["softmax"]
    ev.turn.busy = _probe(_Nvml([True] * 10, pid=333), tree={333: 200, 200: 100})
    v = _time(ev, task, StandIn(task))
    assert v.stage == "timed"
    assert "the run's own other processes used the GPU while it was measured (pid 333" in v.timing


def test_where_trials_are_fresh_the_checked_one_is_checked_against_its_fresh_draws(ev, builtin, monkeypatch):
    monkeypatch.setattr(measuring, "FRESH_MAX_SETS", 10**6)
    task = builtin["softmax"]
    assert _time(ev, task, StandIn(task)).stage == "timed"  # its outputs are the reference's of the fresh seeds
    v = _time(ev, task, StandIn(task, stale=True))  # the answers of other draws than the trial's
    assert v.stage != "timed" and "checked unannounced, gave a wrong result" in v.reason
