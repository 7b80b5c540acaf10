"""One round of timed trials inside the measuring turn, how its evidence is judged, and the
result the rows of a timing that checked out make (`timed_result`, a TimingResult).

The candidate's replay child and the baseline child take turns, request by request, each request
a few timed regions; every time a child reports must fit inside the engine's own clock for that
request, and a side stops once its spread says more trials would not move its median. Apart from
fitness.engine.measuring, which decides what is timed when (the turn, the epochs of draws, the kept
baseline trials): this module only runs and judges one round, and writes up the rows.
"""
from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from fitness.common.flags import Flag
from fitness.common.messages import Request, Trial, TrialCheck
from fitness.common.replies import P, PeakFigures, Prepared, Reply
from fitness.common.timing_row import TimingRow
from fitness.engine.launch_configs import KernelConfig
from fitness.engine.verdict import Failure, speedup_from_rows

NOISY = 0.1  # interquartile range over median of a side's trials that flags a shape
STEADY = 0.01  # a spread under which more trials would not move the median (H100 graphs: 0.1-0.5%)
# timed regions per request, the sides still alternating request by request: H100 builtin, a
# request's round trip under a search's load was ~3 ms against ~1 ms of timed region, and
# the round trips held more of the measuring turn than the regions (0.42 of 0.77 s per candidate)
TRIAL_REPS = 3
# A shape far from parity stops at the fewest trials once the sides' spreads together are under
# this share of |ln(speedup)|: more trials could not change which side is faster nor the ratio's
# size by much. H100 builtin under a bench's load: the starting matmul and attention kernels
# (0.6-1.8 ms a call, 6-14x slower than torch) had spreads of 20-37% and ran all 21 trials twice,
# 17 of the 31 s the measuring turn held in 60 candidates.
FAR_SHARE = 0.5
# the baseline's tracking request may stray this far from its kept median before both sides are
# timed fully again (fitness.engine.measuring)
DRIFT = 0.03


@dataclass(frozen=True)
class TrialBudget:
    """How many trials a shape runs (`most`; `least` before it may stop) and each request's timeout."""
    most: int
    least: int
    timeout_s: float

    @property
    def enough(self) -> int:
        """Trials every timed shape runs (alternate's fewest): the checked trial is one of them."""
        return max(min(self.least, self.most), 2)


@dataclass(frozen=True)
class TimingResult:
    """The timing stage's finding: the rows, speedup and flags of a timing that checked out
    (`timed`), a note and flags of one that timed nothing, or its failure (a kernel that cannot be
    timed: hang, crash, a failed check)."""
    timing: str = ""  # how (or why not) it was timed
    flags: tuple[str, ...] = ()
    times: tuple[TimingRow, ...] = ()
    speedup: float | None = None
    configs: tuple[KernelConfig, ...] = ()
    phases: dict = field(default_factory=dict)
    timed: bool = False
    failure: Failure | None = None


class TimingRejected(Exception):
    """A timing whose evidence did not check out; the message says which."""


class TimingChild(Protocol):
    """What the timing asks of a clean child (fitness.engine.pool.ChildProcess): a reply per request."""

    def ask(self, req: Request[P], timeout_s: float) -> Reply[P]: ...


def checked(reply: Reply[P], side: str) -> P:
    """The payload of side "c" (the replayed kernels) or "b" (the baseline); TimingRejected when it failed."""
    if reply.error or reply.payload is None:
        raise TimingRejected(f"{'the baseline' if side == 'b' else 'the replayed kernels'}: {reply.error}")
    return reply.payload


def spread(times: list[float]) -> float:
    q = statistics.quantiles(times, n=4)
    return (q[2] - q[0]) / statistics.median(times)


def noisy(times: dict[str, list[float]]) -> bool:
    return max(spread(times["c"]), spread(times["b"])) > NOISY


def far(times: dict[str, list[float]]) -> bool:
    """Every trial of one side is slower than every trial of the other, and the medians lie so
    far apart that the spreads cannot blur their ratio (FAR_SHARE). The first part keeps a
    passing disturbance (another context's kernels, time-sliced in) from stopping a shape early
    on a ratio it made: alternating sides share it, so their trials overlap."""
    c, b = times["c"], times["b"]
    if not (max(c) < min(b) or max(b) < min(c)):
        return False
    ratio = statistics.median(b) / statistics.median(c)
    return spread(c) + spread(b) <= FAR_SHARE * abs(math.log(ratio))


_RNG = random.SystemRandom()  # the rotations and the checked trial: nothing a process can predict


@dataclass
class Draws:
    """How a shape's trials use the draws: `n` draws the sides hold (fitness.clean.timing.draws_for),
    the rotation and sets of the epoch's checked trial, and which trial of the candidate's it is
    this time (chosen per candidate among the trials that always run). Every other trial's
    rotation is drawn fresh, never the previous one of the side nor the checked one."""

    n: int
    check_rot: int = 0
    picks: list[int] = field(default_factory=list)
    check_at: int = -1  # the candidate's trial whose outputs are kept; -1: none
    fresh_base: int | None = None  # trials of fresh draws: a side's k-th trial has key fresh_base + k
    # the checked trial's key where trials are fresh: its draws are as new to the kernel as every other
    # trial's (were it on the pool, which the warm-ups show, a kernel could compute only for inputs it
    # has seen and skip the rest); one per epoch, so the engine's references of it serve every candidate
    check_key: int | None = None
    prev: dict[str, int] = field(default_factory=dict)
    issued: dict[str, int] = field(default_factory=dict)  # trials asked of each side so far

    def rot(self, side: str) -> int:
        avoid = {self.prev.get(side), self.check_rot}
        r = _RNG.choice([x for x in range(self.n) if x not in avoid] or
                        [x for x in range(self.n) if x != self.prev.get(side)] or [0])
        self.prev[side] = r
        return r

    def request(self, side: str, first: int, reps: int) -> dict[str, Any]:
        """The Trial fields of trials first..first+reps-1: their rotations and, where one of them is
        the checked trial, the sets to keep after it (once per candidate: a second round of trials
        is not checked again)."""
        j = self.check_at - first if side == "c" and first <= self.check_at < first + reps else -1
        rots = []
        for i in range(reps):
            rots.append(self.check_rot if i == j else self.rot(side))
            self.prev[side] = rots[-1]
        fields: dict[str, Any] = {"rots": tuple(rots)}
        if self.fresh_base is not None:  # every trial on draws no trial had
            start = self.issued.get(side, 0)  # counted over every round: a second one draws anew too
            fields["fresh"] = tuple(self.check_key if i == j else (self.fresh_base + start + i) % (2**31 - 1)
                                    for i in range(reps))
            self.issued[side] = start + reps
        if j >= 0:
            self.check_at = -2  # issued
            fields["check"] = TrialCheck(rep=j, picks=tuple(self.picks))
        return fields


def check_plan(n_sets: int, n_draws: int) -> tuple[int, list[int]]:
    """The epoch's checked trial: its rotation and the sets whose outputs are kept (the first, the
    last and one at random): one per epoch, so the baseline's outputs of it serve every candidate."""
    return _RNG.randrange(max(1, n_draws)), sorted({0, n_sets - 1, _RNG.randrange(n_sets)})


def warm_up(sides: dict[str, TimingChild], passes: int, timeout_s: float, draws: Draws) -> None:
    """One untimed request per side as the turn begins. H100 TritonBench A/A alone: the first
    request of a turn (its 3 regions) ran 15-25% slow (2.93 against 2.58 us, 1.9 against 1.55 us),
    the next ones did not; the candidate's side, which opens round 0, took it every time."""
    for k in ("c", "b"):
        req = Trial(k=0, passes=passes, reps=TRIAL_REPS, warm=True,  # its times unread
                    rots=tuple(draws.rot(k) for _ in range(TRIAL_REPS)))
        checked(sides[k].ask(req, timeout_s), k)


def alternate(sides: dict[str, TimingChild], n: int, passes: int, spent: dict[str, float], budget: TrialBudget,
              draws: Draws, track: bool = False) -> dict[str, list[float]]:
    """Alternating requests of TRIAL_REPS trials each, the order flipped each round; the
    times a request reports must fit inside the engine's own clock for it. `track`: the
    baseline runs in the first round only (its kept trials stand for the rest). `spent` gets
    the seconds of the timed regions and of the children's handling (the rest of a
    request's wall time is the round trip). `draws`: each trial's rotation, and the checked one."""
    times: dict[str, list[float]] = {"c": [], "b": []}
    most = budget.most
    enough = budget.enough
    steady = ("c",) if track else ("c", "b")
    for r in itertools.count():
        i = len(times["c"])
        if i >= most or (i >= enough and (max(spread(times[k]) for k in steady) <= STEADY or far(times))):
            break
        reps = min(TRIAL_REPS, most - i, enough - i if i < enough else most)  # a stop can come at `enough`
        order = ("c", "b") if r % 2 == 0 else ("b", "c")
        for k in (order if not track or r == 0 else ("c",)):
            req = Trial(k=i, passes=passes, reps=reps, **draws.request(k, len(times[k]), reps))
            times[k].extend(_one_request(sides[k], k, req, n, spent, budget.timeout_s))
    return times


def _one_request(child: TimingChild, side: str, req: Trial, n: int, spent: dict[str, float],
                 timeout_s: float) -> list[float]:
    """One request's trials, in ms per input set (`n` sets, `req.passes` passes a region)."""
    t = time.perf_counter()
    reply = child.ask(req, timeout_s)
    ms = [float(x) for x in checked(reply, side).ms]
    wall_ms = (time.perf_counter() - t) * 1e3
    region_ms = sum(ms) * n * req.passes
    spent["trial_regions"] = spent.get("trial_regions", 0.0) + region_ms / 1e3
    handled = reply.phase_ms.get("handle", 0.0)
    spent["trial_in_child"] = spent.get("trial_in_child", 0.0) + handled / 1e3
    if len(ms) != req.reps or not (min(ms) > 0 and region_ms <= wall_ms * 1.02 + 0.5):
        raise TimingRejected(f"reported times ({region_ms:.3f} ms in all) are not inside the engine's "
                             f"clock for that request ({wall_ms:.3f} ms)")
    return ms


def timed_row(plan: dict, times: dict, method: str, n_sets: int, cal: dict[str, Prepared]) -> TimingRow:
    """`baseline_kept`: the baseline's median is over its kept trials of the epoch (this turn's
    tracking request among them), not over trials alternating with this candidate's only. `cal`:
    each side's calibration ("c", "b")."""
    bytes_, flops = cal["b"].cost or (0.0, 0.0)
    case = plan["case"]
    return TimingRow(shape=case["shape"], dtype=case["dtype"], candidate_ms=statistics.median(times["c"]),
                     baseline_ms=statistics.median(times["b"]), candidate_spread=spread(times["c"]),
                     baseline_spread=spread(times["b"]), method=method, input_sets=n_sets,
                     trials=len(times["c"]), baseline_trials=len(times["b"]),
                     baseline_kept=bool(plan.get("baseline_reused")), bytes=bytes_, flops=flops,
                     describe=cal["b"].describe,
                     phase_ms={"warm_up": cal["c"].warm_ms, "baseline_warm_up": cal["b"].warm_ms})


def timed_result(plans: list[dict], rows: list[TimingRow], marks: list[float], peaks: PeakFigures | None,
                 floor: bool) -> TimingResult:
    """The finding of a timing that checked out (fitness.engine.measuring): its rows, speedup, flags,
    phases (`marks`: asked for the turn, took it, gave it back) and how it was timed."""
    t0, t1, t2, t3 = marks
    phases: dict = {"timing_prepare_s": round(t1 - t0, 3), "timing_wait_s": round(t2 - t1, 3),
                    "timing_exclusive_s": round(t3 - t2, 3)}
    for name in ("turn", "prepare"):
        summed: dict[str, float] = {}
        for plan in plans:
            for k, x in plan.get(f"{name}_s", {}).items():
                summed[k] = summed.get(k, 0.0) + x
        phases[name] = {k: round(x, 3) for k, x in summed.items()}
    rows, speedup, flags = speedup_from_rows(rows, peaks, floor=floor)
    methods = sorted({r.method for r in rows})
    lo, hi = min(r.trials for r in rows), max(r.trials for r in rows)
    kept = sum(r.baseline_kept for r in rows)
    timing = (f"median of {lo if lo == hi else f'{lo}-{hi}'} trials per shape "
              f"(fewer once both sides are steady), the replayed kernels and the baseline "
              f"alternating in two clean processes, L2 flushed, {'/'.join(methods)}"
              + (f"; the baseline's median over its last trials of this epoch's draws on {kept} of "
                 f"{len(rows)} shapes (it ran beside this candidate too)" if kept else "")
              + "; one trial of the replay per shape, picked unannounced, checked on its outputs"
              + f"; {t3 - t2:.2f} s measuring, {time.monotonic() - t0:.1f} s in all")
    gpu_note, more = _gpu_note(plans)
    if any(max(r.candidate_spread, r.baseline_spread) > NOISY for r in rows):
        more.append(Flag.NOISY_TIMING)
    return TimingResult(timing=timing + gpu_note, flags=(*flags, *more), times=tuple(rows), speedup=speedup,
                        phases=phases, timed=True)


def _gpu_note(plans: list[dict]) -> tuple[str, list[str]]:
    """What the verdict may claim about the GPU's other processes (fitness.engine.gpu_busy): a shape
    measured again after another process was seen at work, or the check that could not run. An
    unverified turn is not failed (no GPU machine would time anything without NVML) but claims
    less: its baseline ran beside this candidate on every shape, so whatever slowed one side met
    the other, and the flag says so."""
    note = ""
    flags: list[str] = []
    drifted = sum(bool(p.get("baseline_drifted")) for p in plans)
    if drifted:
        note += (f"; on {drifted} shape(s) the baseline strayed over {DRIFT:.0%} from its kept trials and was "
                 "measured again beside this candidate")
    shared = sorted({p["gpu_shared"] for p in plans if p.get("gpu_shared")})
    if shared:
        note += (f"; the run's own other processes used the GPU while it was measured ({'; '.join(shared)}): "
                 "both sides met them, alternating")
    again = [p["busy_seen"] for p in plans if p.get("busy_seen")]
    if again:
        note += f"; measured again after the GPU was busy with {'; '.join(sorted(set(again)))}"
    reasons = sorted({p["busy_unverified"] for p in plans if p.get("busy_unverified")})
    if reasons:
        note += (f"; {reasons[0]}: nothing shows the GPU was idle but for the two sides, so the "
                 "baseline's kept trials were not reused")
        flags.append(Flag.GPU_IDLE_UNVERIFIED)
    return note, flags
