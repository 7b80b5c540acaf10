"""The GPU's one measuring turn (fitness.engine.evaluator's timing stage).

Only the trials hold the turn. Before it, the candidate's clean child loads the recorded
kernels, draws every shape's inputs, warms up and captures its graph while another candidate is
measured; after it, the timed outputs go to the engine's reference. The baseline runs in one
long-lived clean child, which keeps each shape's prepared side (inputs, graph) for EPOCH_USES
candidates: both sides are timed on the same draws of an epoch, drawn by the engine and seen only
by the clean processes. Every reported time must fit inside the engine's clock for its request.
"""
from __future__ import annotations

import logging
import random
import statistics
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from fitness.clean.timing import FRESH_MAX_SETS, MAX_SETS, draws_for, passes_for
from fitness.common.flags import Flag
from fitness.common.messages import TimeCheck, TimeOpen, TimePrepare, TimeSets
from fitness.common.replies import Opened, Prepared
from fitness.common.timing_row import TimingRow
from fitness.engine.baseline_child import ShapeKey, StepClock
from fitness.engine.gpu_busy import busy_note
from fitness.engine.judges import Judge, fresh_seed
from fitness.engine.launch_configs import describe, timed_configs
from fitness.engine.pool import CancelCheck, Cancelled, WorkerFailure
from fitness.engine.replay_check import check_outputs
from fitness.engine.replay_check import unwritten_as as unwritten_as  # re-exported: where tests read it
from fitness.engine.trials import DRIFT as DRIFT
from fitness.engine.trials import STEADY as STEADY  # re-exported: where the timing's figures were read
from fitness.engine.trials import TRIAL_REPS as TRIAL_REPS
from fitness.engine.trials import (
    Draws,
    TimingChild,
    TimingRejected,
    TimingResult,
    alternate,
    checked,
    far,
    noisy,
    timed_result,
    timed_row,
    warm_up,
)
from fitness.engine.turn_state import ORACLE_BYTES as ORACLE_BYTES
from fitness.engine.turn_state import TurnState
from fitness.engine.verdict import Failure
from suites.task import Task

logger = logging.getLogger(__name__)

EPOCH_USES = 16  # candidates timed on one set of draws (and one prepared baseline side) per shape
# The baseline's trials are kept per shape and epoch (same clean process, inputs and graph) and
# reused: each turn the baseline runs one request of TRIAL_REPS regions beside the candidate's,
# which joins the kept ones; every REMEASURE_EVERY-th candidate of an epoch, or when that request
# strays over DRIFT (fitness.engine.trials) from the kept median (the GPU changed: clocks, a neighbour), both sides
# alternate fully again. H100 builtin: the baseline's regions were half of every turn's trials.
BASELINE_KEPT = 21  # the most recent baseline trials a shape's median is taken over
REMEASURE_EVERY = 8
# Long-lived clean baseline children; each task's shapes live in one of them. A new shape's side
# (module load, compile, draws, warm-up, sets, graph) is prepared in its child before the turn,
# while the other child serves the turn: H100 TritonBench, preparing it inside the turn held the
# GPU ~5 s at each task's first timing and ~70% of a 12-task search's turn time.
BASELINE_CHILDREN = 2  # the evaluator's clean baseline pool has this many places
BASELINE_MEMORY_SHARE = 0.3  # of the GPU's memory, for all baseline children's kept sides together
# Seeds of an epoch's draws (fitness.clean.timing: a side holds one draw per input set and one over, as far
# as these go). A builtin task draws on the GPU in microseconds; a script task's perf file may take
# seconds a draw (TritonBench matmul_dequant_int4: 30 s), in the replay child of every candidate.
FUNCTION_DRAWS = MAX_SETS + 1
SCRIPT_DRAWS = 3  # as many as before issue 39: calibration's three timed calls still on distinct draws


def _shape_key(task: Task, case: dict, baseline_source: str | None) -> ShapeKey:
    return ShapeKey(task.suite, task.name, repr(sorted(case["shape"].items())), case["dtype"], hash(baseline_source))


def _calibration(opened: Opened) -> Prepared:
    """The opened side's calibration; TimingRejected where the baseline child sent none."""
    if opened.cal is None:
        raise TimingRejected("the baseline: its side opened without its calibration")
    return opened.cal


class MeasuringTurn(TurnState):
    def time(self, task: Task, judge: Judge, traces: dict, replay: TimingChild, base_src: str | None = None,
             cancel: CancelCheck | None = None, source: str | None = None) -> TimingResult:
        """Times a candidate's replayed kernels against the baseline, shape by shape (the task's
        `judge` says which calls are timed and how they are checked; `source`: the candidate's, which
        the replay child builds the timed kernels from). Raises Cancelled when
        `cancel()` turns true while it waits for the turn (a stopping run does not wait for the
        GPU: the candidate stays unevaluated, for a resume)."""
        timed = [(case, trace) for case, trace in traces.values() if case["split"] == judge.timed_split]
        if not timed:
            return TimingResult(timing="not timed: the suite gives no benchmark inputs for this task",
                                flags=(Flag.UNTIMED,))
        marks = [time.monotonic()]
        try:
            plans, rows = self._turn(task, judge, timed, replay, (base_src, source), cancel, marks)
            peaks = self.peaks  # once, after a turn; none measured: no roofline to floor at, so no timing
        except (WorkerFailure, TimingRejected) as e:
            logger.info("%s: timing failed: %s", task.name, str(e).splitlines()[0] if str(e) else type(e).__name__)
            flags = (Flag.TIMING_FAILED, *((Flag.WORKER_REPLACED,) if isinstance(e, WorkerFailure) else ()))
            # a kernel that cannot be timed (hang, crash, a failed check) is no parent
            return TimingResult(failure=Failure(f"timing: {e}", "correct", flags))
        result = timed_result(plans, rows, marks, peaks, judge.floor)
        configs = timed_configs((str(case["shape"]), trace) for case, trace in timed)
        how = result.timing + ("; " + describe(configs, len(timed)) if configs else "")
        return replace(result, configs=tuple(configs), timing=how)

    def _turn(self, task: Task, judge: Judge, timed: list[tuple[dict, dict]], replay: TimingChild,
              sources: tuple[str | None, str | None], cancel: CancelCheck | None,
              marks: list[float]) -> tuple[list[dict], list[TimingRow]]:
        """The plans and rows of every timed shape: prepared before the turn, measured inside
        it, checked after it. `sources`: the baseline's and the candidate's. `marks` gets when the
        turn was asked for, taken and given back."""
        # outside the measuring turn: the replay child builds the kernels, draws every shape's
        # inputs, warms up and captures, while another candidate is being measured
        plans = self._prepare(task, judge, timed, replay, sources)
        marks.append(time.monotonic())
        self._take_turn(cancel)
        try:
            marks.append(time.monotonic())
            with self._baseline(task.name) as baseline:  # held for all shapes: no preparing between them
                rows = [self._measure(task, plan, replay, baseline, judge.oracle_is_baseline, first=i == 0)
                        for i, plan in enumerate(plans)]
            marks.append(time.monotonic())
            self.busy_s += marks[3] - marks[2]
        finally:
            self.lock.release()
        for plan in plans:  # after the turn: only the engine's reference is needed
            self._check_replay(judge, plan, replay)
        return plans, rows

    def _take_turn(self, cancel: CancelCheck | None = None) -> None:
        while not self.lock.acquire(timeout=0.2 if cancel else -1):
            if cancel is not None and cancel():
                raise Cancelled()

    def _epoch(self, key: ShapeKey, n_seeds: int, fresh: bool = False) -> dict:
        """The draws this shape is timed on now. Both sides run the same draws (`n_seeds`); the
        baseline child keeps its side (inputs, graph) for EPOCH_USES candidates, then fresh ones
        are drawn. Sound because only the clean processes ever see these inputs. `fresh`: the task
        draws on the GPU, so a region of few sets can take fresh draws every trial (fitness.clean.timing)."""
        with self._epoch_lock:
            ep = self._epochs.get(key)
            if ep is None or ep["uses"] >= EPOCH_USES:
                known = self._baseline_cal.get(key)
                nth = ep["nth"] + 1 if ep else 0
                ep = self._epochs[key] = {"id": next(self._epoch_ids), "nth": nth,
                                          "seeds": self._seed_bank.seeds(key.task_key, nth, n_seeds),
                                          "n": self._n_sets(known) if known else 0, "uses": 0,
                                          "fresh": fresh_seed() if fresh else None,
                                          "check_key": fresh_seed() if fresh else None}
            ep["uses"] += 1
            return dict(ep)

    def _prepare(self, task: Task, judge: Judge, timed: list[tuple[dict, dict]], replay: TimingChild,
                 sources: tuple[str | None, str | None]) -> list[dict]:
        """Every shape made ready outside the measuring turn, the plans the turn follows. The
        baseline's sides (kept, or prepared now in its own child) are readied in a thread beside
        the replay child's preparing (inputs drawn, kernels warmed); each shape's sets and graph
        follow once both sides of it are done. H100, matmul_dequant_int4 (30 s a draw): the
        baseline child drew for 97 s, then the replay child for 97 s more, one after the other."""
        base_src, source = sources
        plans = []
        for slot, (case, _) in enumerate(timed):
            key = _shape_key(task, case, base_src)
            ep = self._epoch(key, FUNCTION_DRAWS if task.script is None else SCRIPT_DRAWS,
                             task.script is None and task.device_inputs)
            # the replay's side; the baseline's is this with its own slot and source
            opening = TimePrepare(task=self.settings.task_spec(task), case={**case, "seed": ep["seeds"][0]},
                                  seeds=tuple(ep["seeds"]), slot=slot)
            plans.append({"slot": slot, "case": case, "epoch": ep, "opening": opening, "key": key, "source": source,
                          "base_src": base_src, "base_slot": f"epoch{ep['id']}", "n": ep["n"], "prepare_s": {}})
        baseline_side = ThreadPoolExecutor(1)
        try:
            bases = [baseline_side.submit(self._ready_baseline, task, plan, judge.oracle_is_baseline)
                     for plan in plans]
            for plan, base, (_, trace) in zip(plans, bases, timed):
                self._prepare_replay(plan, trace, replay, base)
        finally:  # a failed replay stops the baseline's sides not begun yet
            baseline_side.shutdown(wait=True, cancel_futures=True)
        return plans

    def _prepare_replay(self, plan: dict, trace: dict, replay: TimingChild, base: Future[int]) -> None:
        clock = StepClock(plan["prepare_s"])
        prepared = replay.ask(replace(plan["opening"], trace=trace, source=plan["source"]),
                              self.settings.timing_timeout_s)
        plan["cal"] = checked(prepared, "c")
        clock.tick("replay")
        for k, ms in prepared.phase_ms.items():  # where the replay child's part went
            plan["prepare_s"][f"replay.{k}"] = ms / 1e3
        plan["n"] = base.result()  # the baseline's number of input sets, which the replay's must match
        clock.tick("baseline_wait")
        sets = TimeSets(slot=plan["slot"], n_sets=plan["n"], graph=True)
        plan["method"] = checked(replay.ask(sets, self.settings.timing_timeout_s), "c").method
        clock.tick("sets")

    def _ready_baseline(self, task: Task, plan: dict, oracle_is_baseline: bool) -> int:
        """The baseline's side of the plan's shape and epoch (and, where the baseline is the oracle,
        its checked outputs) made ready before the turn; the number of input sets of the epoch."""
        clock = StepClock(plan["prepare_s"])
        with self._baseline(task.name) as child:
            b = self._baseline_open(task, plan, child, inside=False)
            if oracle_is_baseline:
                self._check_of(plan, b.n_sets)
                self._oracle(plan, child)
        clock.tick("baseline")
        return b.n_sets

    def _baseline_open(self, task: Task, plan: dict, base: TimingChild, inside: bool = True) -> Opened:
        """The baseline's side of this shape and epoch, opened: kept from an earlier candidate,
        or prepared now (draws, warm-up, calibration, input sets, graph). Inside the turn only
        when the side prepared before it was dropped for memory or its child was replaced."""
        timeout = self.settings.timing_timeout_s
        slot = plan["base_slot"]
        opened = checked(base.ask(TimeOpen(slot=slot), timeout), "b")
        if not opened.missing:
            return opened
        if inside:
            plan["baseline_prepared"] = True
            self.baseline_prepares += 1
        else:
            self.baseline_prepares_outside += 1
        prepare = replace(plan["opening"], slot=slot, baseline_source=plan["base_src"],
                          keep_share=BASELINE_MEMORY_SHARE / len(self._bases))
        cal = checked(base.ask(prepare, timeout), "b")
        key = plan["key"]
        self._baseline_cal[key] = cal
        n = plan["n"] or self._n_sets(cal)
        with self._epoch_lock:
            ep = self._plan_epoch(plan)
            if ep is not None:
                ep["n"] = n  # later candidates of this epoch capture before their turn
        checked(base.ask(TimeSets(slot=slot, n_sets=n, graph=True), timeout), "b")
        return checked(base.ask(TimeOpen(slot=slot), timeout), "b")

    def _measure(self, task: Task, plan: dict, replay: TimingChild, baseline: TimingChild, oracle_is_baseline: bool,
                 first: bool) -> TimingRow:
        """One shape, inside the measuring turn: both sides' input sets ready, then trials
        alternating between them, each bounded by the engine's clock (the turn's `first` shape
        after an untimed request of each side; `oracle_is_baseline`: the judge's)."""
        clock = StepClock(plan.setdefault("turn_s", {}))
        sides: dict[str, TimingChild] = {"c": replay, "b": baseline}
        b = self._baseline_open(task, plan, sides["b"])
        clock.tick("baseline_prepare" if plan.get("baseline_prepared") else "baseline_open")
        n, slots = b.n_sets, {"c": plan["slot"], "b": plan["base_slot"]}
        methods = self._same_method(sides, slots, n, {"b": b.method, "c": plan["method"] if plan["n"] == n else ""})
        checked(replay.ask(TimeOpen(slot=plan["slot"]), self.settings.timing_timeout_s), "c")
        clock.tick("sets")
        bc = _calibration(b)
        passes = passes_for(n, bc.in_bytes, bc.t_one_ms, bc.l2_bytes)
        draws = self._draws(plan, n)
        if first:
            warm_up(sides, passes, self.settings.timing_timeout_s, draws)
        times = self._verified_trials(plan, sides, (methods["c"], n, passes), draws)
        clock.tick("trials")
        if oracle_is_baseline:  # the suite's kernel is the oracle: its outputs, once per epoch
            plan["oracle"] = self._oracle(plan, sides["b"])
            clock.tick("checks")
        cal = {"c": plan["cal"], "b": bc}
        return timed_row(plan, times, methods["c"], n, cal)

    def _draws(self, plan: dict, n: int) -> Draws:
        """The shape's trials' draws: how many the sides hold, the epoch's checked trial, and which
        of this candidate's trials it is (one of those every shape runs, picked now, told no one)."""
        rot, picks = self._check_of(plan, n)
        at = random.SystemRandom().randrange(self.settings.budget.enough)
        fresh = plan["epoch"].get("fresh") if n <= FRESH_MAX_SETS else None
        plan["check_key"] = plan["epoch"].get("check_key") if fresh is not None else None
        return Draws(draws_for(n, len(plan["epoch"]["seeds"])), rot, picks, at, fresh, plan["check_key"])

    def _verified_trials(self, plan: dict, sides: dict[str, TimingChild], how: tuple[str, int, int],
                         draws: Draws) -> dict[str, list[float]]:
        """The trials, on a GPU no other process used meanwhile (issue 39, class 6: a neighbour's
        work slows whichever side it meets, and a slowed baseline inflates the speedup). Where
        another process was seen at work the shape is measured once more, both sides fully and
        nothing kept; seen again, the timing fails. Where the GPU's processes cannot be read, the
        baseline's kept trials are not reused (both sides share whatever slowed them) and the
        verdict says what could not be checked."""
        pids = {p for side in sides.values() for p in getattr(side, "pids", [])}
        for attempt in range(2):
            since = self.busy.start()
            times = self._timed_trials(plan, sides, how, draws, reuse=attempt == 0 and self.busy.available())
            seen = self.busy.foreign(since, pids)
            if self.busy.shared:
                plan["gpu_shared"] = busy_note(self.busy.shared)
            if seen is None:
                plan["busy_unverified"] = self.busy.reason or self.busy.window
                return times
            if not seen:
                return times
            plan["busy_seen"] = busy_note(seen)
            logger.info("the GPU was busy with %s while a shape was measured", plan["busy_seen"])
            self._forget(plan)  # the baseline's trials of that window stand for no later candidate
        raise TimingRejected(f"the GPU was busy with another process while this shape was measured, twice "
                             f"({plan['busy_seen']}): neither side's time can be trusted")

    def _timed_trials(self, plan: dict, sides: dict[str, TimingChild], how: tuple[str, int, int],
                      draws: Draws, reuse: bool = True) -> dict[str, list[float]]:
        """The candidate's trials and the baseline's: the baseline's kept ones of this epoch
        where they still hold (one tracking request of its own this turn joins them), else both
        sides alternating fully. `how`: (method, input sets, passes), which kept trials share.
        `reuse`: whether kept trials may stand in (not while the GPU's idleness is unverified)."""
        _, n, passes = how
        kept = self._kept(plan, how) if reuse else None
        if kept:
            times = alternate(sides, n, passes, plan["turn_s"], self.settings.budget, draws, track=True)
            held = abs(statistics.median(times["b"]) / statistics.median(kept) - 1) <= DRIFT
            times["b"] = (kept + times["b"])[-BASELINE_KEPT:]
            if held and (not noisy(times) or far(times)):
                self._keep(plan, how, times["b"], full=False)
                plan["baseline_reused"] = True
                return times
            plan["baseline_drifted"] = not held
        times = alternate(sides, n, passes, plan["turn_s"], self.settings.budget, draws)
        # once more: a swing of the clocks passes, a noisy kernel stays noisy (after a tracked round
        # that strayed, this full one is already the second)
        if noisy(times) and not kept and not far(times):
            times = alternate(sides, n, passes, plan["turn_s"], self.settings.budget, draws)
        self._keep(plan, how, times["b"], full=True)
        return times

    def _kept(self, plan: dict, how: tuple) -> list[float] | None:
        """The baseline's kept trials of this shape and epoch, timed the same way; None when a
        full alternation is due."""
        with self._epoch_lock:
            ep = self._plan_epoch(plan)
            kept = ep.get("kept") if ep is not None else None
            if not kept or kept["how"] != how or kept["since_full"] >= REMEASURE_EVERY - 1:
                return None
            return list(kept["times"])

    def _keep(self, plan: dict, how: tuple, times: list[float], full: bool) -> None:
        with self._epoch_lock:
            ep = self._plan_epoch(plan)
            if ep is None:
                return
            since = 0 if full else ep["kept"]["since_full"] + 1
            ep["kept"] = {"how": how, "times": times[-BASELINE_KEPT:], "since_full": since}

    def _forget(self, plan: dict) -> None:
        with self._epoch_lock:
            ep = self._plan_epoch(plan)
            if ep is not None:
                ep.pop("kept", None)

    def _same_method(self, sides: dict[str, TimingChild], slots: dict, n: int,
                     methods: dict[str, str]) -> dict[str, str]:
        """Both sides' regions made alike: CUDA graphs when both can be captured, else eager.
        A side switches between the two over the same sets (the baseline's graph stays for the
        next candidate: one uncapturable candidate once left its epoch eager for all after it)."""
        def sets(k: str, graph: bool) -> str:
            req = TimeSets(slot=slots[k], n_sets=n, graph=graph)
            return checked(sides[k].ask(req, self.settings.timing_timeout_s), k).method
        if not methods["c"]:  # prepared for another number of sets, or not yet
            methods["c"] = sets("c", True)
        if methods["b"] != methods["c"]:
            methods["b"] = sets("b", methods["c"] == "cuda-graph")
            if methods["b"] != methods["c"]:  # the baseline itself cannot be captured
                methods["c"] = sets("c", False)
        return methods

    def _check_replay(self, judge: Judge, plan: dict, replay: TimingChild) -> None:
        """The outputs one timed trial of the replay kept (picked at random, prepared like every
        other), against the engine's own reference of each set's draw, or the baseline's outputs
        of the same trial's sets (memory the baseline leaves unwritten is no part of them)."""
        req = TimeCheck(slot=plan["slot"])
        outs = checked(replay.ask(req, self.settings.timing_timeout_s), "c").outputs
        check_outputs(judge, plan, outs)
