"""fitness/engine/measuring.py: the timing schedule, on CPU: what happens outside the measuring turn and
what inside, the baseline's prepared sides reused per epoch of draws, and the checks a timing
must pass. The children are stand-ins that answer the timing requests as fitness.process.child does
(no GPU here); the outputs they report are the task's own reference on the draws they were given."""
import contextlib
import time

import pytest

import fitness.engine.measuring as measuring
from fitness.clean.timing import draws_for, fresh_seed_of
from fitness.common.inputs import draw_inputs
from fitness.engine.correctness import CorrectnessResult
from fitness.engine.evaluator import EvalConfig, Evaluator
from fitness.engine.gpu_busy import BusyProbe
from fitness.engine.measuring import TRIAL_REPS, MeasuringTurn
from fitness.engine.outcome import Evaluation, verdict_from
from fitness.engine.verdict import Verdict
from suites.script import to_wire
from tests.stand_ins import Asks

CASE = {"split": "tuning", "shape": {"M": 4, "N": 8}, "dtype": "float32", "seed": 1}


class StandIn(Asks):
    """A timing child, asked as the engine asks (tests.stand_ins.Asks: each typed request answered
    from its wire dict). `ms` per input set; `capture`: whether its region can be a CUDA graph;
    `stale`: its checked outputs are those of the draw its set held the trial before (a kernel
    that kept an old answer); `ms` may be a list, answered in turn (a noisy side). Its outputs
    are the task's reference of the draw each set held, (set + rotation) % draws."""

    def __init__(self, task, ms=0.001, capture=True, stale=False, in_bytes=128):
        self.task, self.ms, self.capture, self.stale, self.in_bytes = task, ms, capture, stale, in_bytes
        self.trials: list[dict] = []
        self.warm: list[int] = []  # untimed requests, by how many timed regions came before each
        self.calls: list[tuple] = []
        self.sides: dict[str, dict] = {}
        self.current: dict | None = None
        self.seeds: list[list[int]] = []  # the draws of every shape it prepared
        self.rots: list[int] = []  # every timed trial's rotation, in order

    def request(self, msg: dict, timeout: float) -> dict:
        op, slot = msg["op"], str(msg.get("slot"))
        self.calls.append((op, slot))
        if op == "time_prepare":
            self.seeds.append(msg["seeds"])
            self.sides[slot] = {"case": msg["case"], "seeds": msg["seeds"], "n": 0, "method": "",
                                "cal": {"t_one_ms": 0.01, "in_bytes": self.in_bytes, "l2_bytes": 4096, "warm_ms": 1.0,
                                        "cost": [1e3, 0.0]}}
            return dict(self.sides[slot]["cal"])
        if op == "time_sets":
            side = self.sides[slot]
            side["n"], side["method"] = msg["n_sets"], "cuda-graph" if msg["graph"] and self.capture else "eager"
            return {"method": side["method"], "n_draws": self.n_draws(side)}
        if op == "time_open":
            if slot not in self.sides:
                return {"missing": True}
            self.current = self.sides[slot]
            return {"cal": self.current["cal"], "method": self.current["method"], "n_sets": self.current["n"]}
        if op == "trial":  # one entry per timed region: a request asks for `reps` of them
            time.sleep(0.002)
            if msg.get("warm"):  # untimed, as the turn begins
                self.warm.append(len(self.trials))
                return {"ms": [self.ms if not isinstance(self.ms, list) else self.ms[0]] * msg["reps"]}
            out = []
            fresh = msg.get("fresh") or [None] * len(msg["rots"])
            for j, rot in enumerate(msg["rots"]):
                self.trials.append(msg)
                if msg.get("check") and msg["check"]["rep"] == j:
                    was = (self.rots[-1] if self.rots else rot + 1) if self.stale else rot
                    key = None if fresh[j] is None else fresh[j] + (1 if self.stale else 0)
                    self.current["held"] = [self.outputs(self.current, i, was, key) for i in msg["check"]["picks"]]
                self.rots.append(rot)
                out.append(self.ms[(len(self.trials) - 1) % len(self.ms)] if isinstance(self.ms, list) else self.ms)
            return {"ms": out}
        if op == "time_check":
            held = self.sides[slot].pop("held", [])
            if msg.get("drop", True):
                del self.sides[slot]
            return {"outputs": held}
        if op == "time_oracle":
            side = self.sides[slot]
            outs = [self.outputs(side, i, msg["rot"]) for i in msg["picks"]]
            return {"outputs": [[o, o] for o in outs], "n_draws": self.n_draws(side)}
        if op == "peaks":
            return {"bandwidth_Bps": 3e12, "flops": 1e15, "l2_bytes": 4096, "device": "stand-in"}
        raise AssertionError(f"unexpected request {op}")

    @staticmethod
    def n_draws(side: dict) -> int:
        return draws_for(side["n"], len(side["seeds"]))

    def outputs(self, side: dict, i: int, rot: int, key: int | None = None) -> list:
        """The reference's outputs of input set `i` in a trial of rotation `rot` (or of fresh draws `key`)."""
        seed = side["seeds"][(i + rot) % self.n_draws(side)] if key is None else \
            fresh_seed_of(key, i)
        return [to_wire(self.task.reference(*draw_inputs(self.task, {**side["case"], "seed": seed}, seed)))]

    def ops(self) -> list[str]:
        return [op for op, _ in self.calls]


@contextlib.contextmanager
def stand_in_evaluator(task, **config):
    """An evaluator that takes the GPU path of timing with stand-in children (one correctness
    worker is started and never used); its baseline child is `e.base`, replaceable."""
    # device "cpu": on a GPU machine a real evaluator draws the engine's cases on the GPU, which
    # the stand-in children (drawing on the CPU) never see (H100: every stand-in timing failed)
    e = Evaluator(EvalConfig(workers=1, sandbox=False, device="cpu", **config))
    try:
        e.gpu, e.turn = True, MeasuringTurn(e.settings, None)
        e.turn.busy = BusyProbe(lambda since: [])  # NVML's stand-in: no other process on the GPU
        e.base = StandIn(task)
        e.turn.baseline_side = lambda *a: e.base
        yield e
    finally:
        e.gpu, e.turn = False, None
        e.close()


@pytest.fixture()
def ev(builtin):
    with stand_in_evaluator(builtin["softmax"], trials=5) as e:
        yield e


def timed_verdict(e, task, traces: dict, replay, **how) -> Verdict:
    """The verdict of a candidate right on every case, timed by `e`'s turn: the timing's result
    made a verdict as the evaluator makes it (fitness.engine.outcome.verdict_from)."""
    timing = e.turn.time(task, e.judge(task), traces, replay, **how)
    right = CorrectnessResult("correct", correct=True, heldout_correct=True)
    return verdict_from(Evaluation(task.name, "", "", gpu=True, correctness=right, timing=timing))


def _time(ev, task, replay) -> Verdict:
    return timed_verdict(ev, task, {"k": (CASE, {"trace": "stand-in"})}, replay)


def test_only_the_trials_hold_the_turn_and_the_baseline_is_prepared_once_per_epoch(ev, builtin):
    task = builtin["softmax"]
    first, second = StandIn(task), StandIn(task)
    assert _time(ev, task, first).stage == "timed"
    v = _time(ev, task, second)
    assert v.stage == "timed" and v.times[0].method == "cuda-graph", v.reason
    # the baseline side was drawn, calibrated and captured once, for both candidates
    assert ev.base.ops().count("time_prepare") == 1 and ev.base.ops().count("time_sets") == 1
    # the second candidate knew the number of input sets: it captured before its turn began
    ops = second.ops()
    assert ops.index("time_sets") < ops.index("time_open") < ops.index("trial")
    assert ops[-1] == "time_check"  # checked after the turn
    assert ev.measuring_s > 0 and v.phases["timing_exclusive_s"] > 0


def test_after_an_epoch_both_sides_get_fresh_draws(ev, builtin, monkeypatch):
    monkeypatch.setattr(measuring, "EPOCH_USES", 2)
    task = builtin["softmax"]
    replays = [StandIn(task) for _ in range(3)]
    for r in replays:
        assert _time(ev, task, r).stage == "timed"
    drawn = [r.seeds[0] for r in replays]
    assert drawn[0] == drawn[1] != drawn[2]  # the same draws on both sides within an epoch, then new ones
    assert ev.base.seeds == [drawn[0], drawn[2]]


def test_a_task_s_shapes_share_each_epoch_s_fresh_draws(ev, builtin, monkeypatch):
    monkeypatch.setattr(measuring, "EPOCH_USES", 2)
    task = builtin["softmax"]
    wide = {**CASE, "shape": {"M": 4, "N": 16}}
    per_candidate = []
    for _ in range(3):
        replay = StandIn(task)
        v = timed_verdict(ev, task, {"a": (CASE, {"trace": "stand-in"}), "b": (wide, {"trace": "stand-in"})}, replay)
        assert v.stage == "timed", v.reason
        per_candidate.append(replay.seeds)
    for seeds in per_candidate:  # both shapes of one candidate: one epoch's seeds
        assert seeds[0] == seeds[1] and len(set(seeds[0])) == measuring.FUNCTION_DRAWS
    assert per_candidate[0] == per_candidate[1] and set(per_candidate[2][0]).isdisjoint(per_candidate[0][0])


def test_a_time_outside_the_engines_clock_is_refused(ev, builtin):
    task = builtin["softmax"]
    v = _time(ev, task, StandIn(task, ms=1e4))
    assert v.stage != "timed" and not v.correct
    assert "not inside the engine's clock" in v.reason


def test_both_sides_are_timed_eagerly_when_the_replay_cannot_be_captured(ev, builtin):
    task = builtin["softmax"]
    v = _time(ev, task, StandIn(task, capture=False))
    assert v.stage == "timed" and v.times[0].method == "eager"
    assert ("time_sets", f"epoch{ev.turn._epochs[next(iter(ev.turn._epochs))]['id']}") in ev.base.calls


def test_a_timed_replay_whose_outputs_are_stale_is_refused(ev, builtin):
    task = builtin["softmax"]
    v = _time(ev, task, StandIn(task, stale=True))
    assert v.stage != "timed" and not v.correct
    assert "a timed trial of the replay, checked unannounced, gave a wrong result" in v.reason


def test_a_noisy_shape_is_timed_once_more_and_the_second_round_counts(ev, builtin):
    task = builtin["softmax"]
    swinging = [0.001, 0.0013, 0.0007, 0.001, 0.0016]  # a spread far over measuring.NOISY
    replay = StandIn(task, ms=swinging)
    v = _time(ev, task, replay)
    assert v.stage == "timed" and len(replay.trials) == 2 * ev.config.trials


def test_trials_come_a_few_regions_per_request_with_the_sides_alternating_request_by_request(ev, builtin):
    task = builtin["softmax"]
    ev.base = StandIn(task)
    replay = StandIn(task, ms=[0.001, 0.0013, 0.0007, 0.001, 0.0016])  # noisy: every trial is run
    order = []  # the trial requests of both sides, in the order the turn sent them
    for side, child in (("c", replay), ("b", ev.base)):
        def logged(msg, timeout, side=side, send=child.request):
            if msg["op"] == "trial":
                order.append((side, msg["reps"]))
            return send(msg, timeout)
        child.request = logged
    _time(ev, task, replay)
    assert len(replay.trials) == 2 * ev.config.trials  # every region is a sample
    assert len(order) < 2 * len(replay.trials) and all(1 <= reps <= TRIAL_REPS for _, reps in order)
    assert all(a[0] != b[0] for a, b in zip(order[::2], order[1::2]))  # each round: one request per side
    assert sum(r for side, r in order if side == "c") == sum(r for side, r in order if side == "b")


def test_the_turn_begins_with_one_untimed_request_per_side_and_later_shapes_do_not_wait_for_one(ev, builtin):
    task = builtin["softmax"]
    wide = {**CASE, "shape": {"M": 4, "N": 16}}
    for _ in range(2):  # a new epoch's turn, then one on the baseline's kept side
        replay, order = StandIn(task), []
        for side, child in (("c", replay), ("b", ev.base)):
            def logged(msg, timeout, side=side, send=child.request, order=order):
                if msg["op"] == "trial":
                    order.append((side, bool(msg.get("warm"))))
                return send(msg, timeout)
            child.request = logged
        v = timed_verdict(ev, task, {"a": (CASE, {"trace": "stand-in"}), "b": (wide, {"trace": "stand-in"})}, replay)
        assert v.stage == "timed", v.reason
        assert order[:2] == [("c", True), ("b", True)] and not any(warm for _, warm in order[2:])
        assert replay.warm == [0] and len(replay.trials) == sum(r.trials for r in v.times)
        del ev.base.request  # the stand-in's own again


def test_a_region_is_repeated_only_when_one_pass_over_its_sets_evicts_the_l2(ev, builtin):
    task = builtin["softmax"]
    ev.base = StandIn(task, in_bytes=16)
    small = StandIn(task, in_bytes=16)  # 64 sets (the most) of 16 bytes fit a 4 KiB L2: one pass
    _time(ev, task, small)
    assert {t["passes"] for t in small.trials} == {1}
    ev.base = StandIn(task, in_bytes=4096)  # the baseline's calibration decides both sides' passes
    ev.turn._epochs.clear()
    big = StandIn(task, in_bytes=4096)
    _time(ev, task, big)
    n = big.trials[0]["passes"]
    assert n > 1 and {t["passes"] for t in ev.base.trials + big.trials} == {n}


def test_passes_for_keeps_one_pass_while_the_sets_fit_twice_in_the_l2():
    from fitness.clean.timing import passes_for
    assert passes_for(n_sets=64, in_bytes=1 << 20, t_one_ms=0.005, l2_bytes=50 << 20) == 1
    # H100 softmax 4096x1024 fp32: 14 sets of 16 MiB, 14 us each, a 1 ms region needs 5 passes
    assert passes_for(n_sets=14, in_bytes=16 << 20, t_one_ms=0.0143, l2_bytes=50 << 20) == 5


def test_an_uncapturable_candidate_leaves_the_next_one_timed_on_graphs(ev, builtin):
    task = builtin["softmax"]
    assert _time(ev, task, StandIn(task, capture=False)).times[0].method == "eager"
    v = _time(ev, task, StandIn(task))
    assert v.times[0].method == "cuda-graph", v.timing
    assert "baseline_open" in v.phases["turn"] and "trials" in v.phases["turn"]


def test_a_steady_shape_stops_after_the_fewest_trials_and_a_noisy_one_runs_them_all(builtin):
    task = builtin["softmax"]
    with stand_in_evaluator(task, trials=21, min_trials=7) as e:
        steady = StandIn(task)
        v = _time(e, task, steady)
        assert len(steady.trials) == 7 and v.times[0].trials == 7 and "median of 7 trials" in v.timing
        noisy = StandIn(task, ms=[0.001, 0.0013, 0.0007, 0.001, 0.0016])
        v = _time(e, task, noisy)
        assert len(noisy.trials) == 2 * 21 and v.times[0].trials == 21 and "noisy-timing" in v.flags


def test_a_noisy_shape_far_from_parity_stops_at_the_fewest_trials_and_is_not_timed_again(builtin):
    task = builtin["softmax"]
    with stand_in_evaluator(task, trials=21, min_trials=7) as e:
        e.base = StandIn(task, ms=0.0001)  # (times the stand-ins report must fit its 2 ms per request)
        slow = StandIn(task, ms=[0.001, 0.0013, 0.0007, 0.001, 0.0016])  # a noisy swing, 10x the baseline's time
        v = _time(e, task, slow)
        assert len(slow.trials) == 7 and v.times[0].trials == 7 and "noisy-timing" in v.flags
        assert v.speedup == pytest.approx(0.1)
        near = StandIn(task, ms=[0.00012, 0.00016, 0.00009, 0.00012, 0.00019])  # as noisy, 1.2x: every trial, twice
        v = _time(e, task, near)
        assert len(near.trials) == 2 * 21 and v.times[0].trials == 21
        # 10x on the median, but one trial in five is as fast as the baseline's: a disturbance, not a verdict
        straddling = StandIn(task, ms=[0.001, 0.0011, 0.00005, 0.0009, 0.001])
        _time(e, task, straddling)
        assert len(straddling.trials) == 2 * 21


def test_where_the_baseline_is_the_oracle_its_outputs_are_taken_once_per_epoch(ev, builtin, monkeypatch):
    """Script tasks: the timed outputs are checked against the baseline's on the same sets;
    those are taken once per epoch, and every candidate is checked after its turn."""
    from fitness.common.compare import compare_tree
    task = builtin["softmax"]
    judge = ev.judge(task)
    monkeypatch.setattr(type(judge), "oracle_is_baseline", True)
    monkeypatch.setattr(type(judge), "check_timed", lambda self, case, seed, c, b: compare_tree(
        c, b, task.tolerance, slack=1.0, path="output"))
    first, second = StandIn(task), StandIn(task)
    assert _time(ev, task, first).stage == "timed" and _time(ev, task, second).stage == "timed"
    assert ev.base.ops().count("time_oracle") == 1
    assert second.ops()[-1] == "time_check" and second.ops().index("trial") < second.ops().index("time_check")
    v = _time(ev, task, StandIn(task, stale=True))
    assert v.stage != "timed" and "gave a wrong result" in v.reason


def test_the_baseline_runs_one_request_per_turn_beside_its_kept_trials_and_fully_every_few_candidates(
        ev, builtin, monkeypatch):
    monkeypatch.setattr(measuring, "REMEASURE_EVERY", 3)
    task = builtin["softmax"]
    per_turn = []
    for _ in range(4):
        before = len(ev.base.trials)
        v = _time(ev, task, StandIn(task))
        per_turn.append((len(ev.base.trials) - before, v.times[0].baseline_kept))
    assert per_turn[0][1] is False and per_turn[3][1] is False  # the first, then every third: full
    assert per_turn[1] == (TRIAL_REPS, True) and per_turn[2] == (TRIAL_REPS, True)
    assert per_turn[0][0] == per_turn[3][0] == ev.config.trials  # (5 here) alternating with the candidate's


def test_a_baseline_that_strays_from_its_kept_trials_is_timed_fully_again(ev, builtin):
    task = builtin["softmax"]
    _time(ev, task, StandIn(task))
    ev.base.ms = 0.001 * (1 + 3 * measuring.DRIFT)  # the GPU changed under the baseline
    before = len(ev.base.trials)
    v = _time(ev, task, StandIn(task, ms=0.001 * (1 + 3 * measuring.DRIFT)))
    assert not v.times[0].baseline_kept and len(ev.base.trials) - before > TRIAL_REPS
    assert v.times[0].baseline_ms == pytest.approx(0.001 * (1 + 3 * measuring.DRIFT))
    assert v.speedup == pytest.approx(1.0)


def test_a_stopping_run_does_not_wait_for_the_measuring_turn(ev, builtin):
    from fitness.engine.pool import Cancelled
    task = builtin["softmax"]
    replay = StandIn(task)
    ev.turn.lock.acquire()  # another candidate is being measured
    try:
        t0 = time.monotonic()
        with pytest.raises(Cancelled):
            ev.turn.time(task, ev.judge(task), {"k": (CASE, {"trace": "stand-in"})}, replay,
                         cancel=lambda: time.monotonic() > t0 + 0.3)
        assert time.monotonic() - t0 < 2 and "trial" not in replay.ops()
    finally:
        ev.turn.lock.release()
    assert _time(ev, task, StandIn(task)).stage == "timed"  # the turn is free again


def test_the_baseline_side_of_a_new_shape_is_prepared_before_the_turn_and_the_first_candidate_captures_there_too(
        ev, builtin):
    task = builtin["softmax"]
    held = []  # whether the GPU's turn was held when the baseline was asked to prepare
    send = ev.base.request

    def watched(msg, timeout):
        if msg["op"] in ("time_prepare", "time_sets"):
            held.append(ev.turn.lock.locked())
        return send(msg, timeout)
    ev.base.request = watched
    first = StandIn(task)
    v = _time(ev, task, first)
    assert v.stage == "timed" and held == [False, False]
    assert ev.turn.baseline_prepares == 0 and ev.turn.baseline_prepares_outside == 1
    assert "baseline_prepare" not in v.phases["turn"] and "baseline_open" in v.phases["turn"]
    ops = first.ops()  # the number of input sets was known before this candidate's turn
    assert ops.index("time_sets") < ops.index("time_open") < ops.index("trial")


def test_the_baseline_s_new_side_is_prepared_beside_the_replay_child_s_own_preparing(ev, builtin):
    """Both children draw and warm up at once (a TritonBench perf file took 97 s a side, one after
    the other); the replay's sets follow with the baseline's number of them."""
    import threading

    task = builtin["softmax"]
    replay = StandIn(task)
    replay_began, overlapped, n_sets = threading.Event(), [], []
    send_base, send_replay = ev.base.request, replay.request

    def base_request(msg, timeout):
        if msg["op"] == "time_prepare":  # one after the other, this would wait in vain
            overlapped.append(replay_began.wait(5))
        return send_base(msg, timeout)

    def replay_request(msg, timeout):
        if msg["op"] == "time_prepare":
            replay_began.set()
        if msg["op"] == "time_sets":
            n_sets.append(msg["n_sets"])
        return send_replay(msg, timeout)
    ev.base.request, replay.request = base_request, replay_request
    v = _time(ev, task, replay)
    assert v.stage == "timed" and overlapped == [True], v.reason
    assert n_sets == [side["n"] for side in ev.base.sides.values()] and n_sets[0] > 0
    assert {"baseline", "replay", "baseline_wait", "sets"} <= set(v.phases["prepare"])


def test_while_one_baseline_child_prepares_a_new_task_the_turn_serves_a_task_of_the_other(builtin):
    """Two tasks on two baseline children: a slow first preparation of one (a TritonBench
    kernel compiling) does not hold the GPU's turn from the other's candidates."""
    import dataclasses
    import threading

    softmax = builtin["softmax"]
    other = dataclasses.replace(softmax, name="softmax_again")  # a second task of the same shapes
    e = Evaluator(EvalConfig(workers=1, trials=5, sandbox=False))
    try:
        e.gpu, e.turn = True, MeasuringTurn(e.settings, None, children=2)
        slow, quick = StandIn(softmax), StandIn(other)
        prepared: list[float] = []  # when the slow preparation ended
        send = slow.request

        def slow_prepare(msg, timeout):
            if msg["op"] == "time_prepare":
                time.sleep(1.0)
                prepared.append(time.monotonic())
            return send(msg, timeout)
        slow.request = slow_prepare
        bases = {"softmax": slow, other.name: quick, "softmax_warm_up": StandIn(softmax), "": StandIn(softmax)}
        e.turn.baseline_side = lambda name="": bases[name]
        e.turn._base("softmax"), e.turn._base(other.name)  # softmax on the first child, the other on the second
        warm = dataclasses.replace(softmax, name="softmax_warm_up")  # the engine's first timing loads its modules
        assert _time(e, warm, StandIn(warm)).stage == "timed"
        done: dict[str, float] = {}

        def run(task, replay):
            assert _time(e, task, replay).stage == "timed"
            done[task.name] = time.monotonic()
        a = threading.Thread(target=run, args=(softmax, StandIn(softmax)))
        a.start()
        time.sleep(0.2)  # softmax's baseline is being prepared
        run(other, StandIn(other))
        a.join()
        assert done[other.name] < prepared[0] < done["softmax"], (done, prepared)
        assert e.turn.baseline_prepares == 0 and e.turn.baseline_prepares_outside == 3
    finally:
        e.gpu, e.turn = False, None
        e.close()


def test_a_slow_kernel_gets_a_region_of_a_few_sets_and_a_fast_one_still_spans_twice_the_l2():
    from fitness.clean.timing import REGION_CAP_MS, n_sets_for
    l2 = 50 << 20
    # H100 cross_entropy2: 4.2 ms a call on small inputs had 64 sets (270 ms a region, eager)
    assert n_sets_for(in_bytes=1 << 20, t_one_ms=4.2, l2_bytes=l2) == 2
    assert n_sets_for(in_bytes=1 << 20, t_one_ms=40.0, l2_bytes=l2) == 1
    # a 14 us softmax on 16 MiB: a 0.2 ms region (over twice the L2), as before
    assert n_sets_for(in_bytes=16 << 20, t_one_ms=0.0143, l2_bytes=l2) == 14
    assert n_sets_for(in_bytes=4 << 20, t_one_ms=0.1, l2_bytes=l2) == 25  # twice the L2: 100 MiB
    # tiny and fast: the most sets; no region over the cap for the L2's sake
    assert n_sets_for(in_bytes=4096, t_one_ms=0.002, l2_bytes=l2) == 64
    for t in (0.05, 0.3, 1.0, 3.0):
        assert n_sets_for(in_bytes=1 << 16, t_one_ms=t, l2_bytes=l2) * t <= max(REGION_CAP_MS, t)
