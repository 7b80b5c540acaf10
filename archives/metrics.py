"""The numbers a report is made of, as pure functions of plain values (no archive, no I/O), so
each one can be checked against a hand computation.

Conventions (the report states them too):
- A task with no correct kernel counts as speedup 1.0 in the speedup means (the user keeps the
  baseline); a correct kernel that was never timed (CPU run, timing failure) has no speedup and
  leaves its task out of the speedup means. No timed task at all: the means are None ("n/a").
- fast_p (KernelBench): share of tasks whose best kernel is correct AND has speedup > p.
  fast_0 is therefore the share of tasks with a correct kernel, timed or not. For p > 0 an
  untimed correct kernel is not known to be fast, so it does not count; where no task was timed
  at all, fast_p for p > 0 is None.
- pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) of Chen et al. (2021), each k on its own
  (GEAK carried sums over from one k to the next), None where k > n.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Sequence

from archives.records import Candidate
from fitness.common.timing_row import TimingRow
from fitness.engine.verdict import geomean  # noqa: F401 - the one geometric mean, used here and by the reports

FAST_P = (0.0, 1.0, 1.5, 2.0)
PASS_K = (1, 2, 5, 10)
FAILED_SPEEDUP = 1.0


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Probability that at least one of k runs drawn without replacement from n runs, c of them
    successful, succeeds. None when k > n: the estimator is undefined there."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if k > n:
        return None
    if n - c < k:
        return 1.0
    # the product form of C(n-c, k) / C(n, k): no huge binomials, no float overflow
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def median(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


def task_speedups(tasks: Iterable[tuple[bool, float | None]]) -> list[float]:
    """Per-task speedups entering the means, from (solved, best speedup): unsolved -> 1.0,
    solved but untimed -> left out."""
    out = []
    for solved, speedup in tasks:
        if not solved:
            out.append(FAILED_SPEEDUP)
        elif speedup is not None:
            out.append(speedup)
    return out


def speedup_stats(tasks: list[tuple[bool, float | None]]) -> dict:
    """Geometric mean, arithmetic mean and median of the task speedups; None for each where no
    task was timed (a run that timed nothing says nothing about speed, failures included)."""
    if not any(solved and s is not None for solved, s in tasks):
        return {"geomean": None, "mean": None, "median": None, "n": 0}
    values = task_speedups(tasks)
    return {"geomean": geomean(values), "mean": mean(values), "median": median(values), "n": len(values)}


def fast_p(tasks: list[tuple[bool, float | None]], p: float) -> float | None:
    """KernelBench's fast_p over tasks given as (correct, speedup)."""
    if not tasks:
        return None
    if p <= 0:
        return sum(1 for ok, _ in tasks if ok) / len(tasks)
    if not any(ok and s is not None for ok, s in tasks):
        return None
    return sum(1 for ok, s in tasks if ok and s is not None and s > p) / len(tasks)


def sol_fraction(rows: Sequence[TimingRow]) -> float | None:
    """Share of the speed of light reached over a kernel's timed shapes: per shape the roofline
    time (bytes / measured bandwidth or FLOPs / measured peak, whichever is larger: what the
    evaluator stores as floor_ms) over the kernel's time, i.e. max(achieved bandwidth / peak
    bandwidth, achieved FLOP/s / peak FLOP/s); geometric mean over shapes, like the speedup.
    None when the shapes carry no roofline (no peaks measured, CPU)."""
    fractions = []
    for r in rows:
        floor, t = r.floor_ms or 0.0, r.candidate_ms
        if floor <= 0 or t <= 0:
            return None
        fractions.append(floor / t)
    return geomean(fractions)


def achieved(rows: Sequence[TimingRow]) -> dict | None:
    """Achieved bandwidth (GB/s) and FLOP rate (TFLOP/s) of a kernel, geometric mean over its
    timed shapes; each None where the task's cost model gives no bytes or no FLOPs."""
    if not rows or any(not r.candidate_ms for r in rows):
        return None
    secs = [r.candidate_ms * 1e-3 for r in rows]
    gbps = [r.bytes / s / 1e9 for r, s in zip(rows, secs)]
    tflops = [r.flops / s / 1e12 for r, s in zip(rows, secs)]
    return {"GBps": geomean(gbps) if all(g > 0 for g in gbps) else None,
            "TFLOPs": geomean(tflops) if all(f > 0 for f in tflops) else None}


def rank(candidate: Candidate) -> tuple[float, int]:
    """Faster first (untimed ranks as 0), then the oldest."""
    return (-(candidate.speedup or 0.0), candidate.id)


def best_kernel(candidates: Iterable[Candidate], need_heldout: bool) -> Candidate | None:
    """The fastest correct candidate; with need_heldout, only among those also correct on the
    held-out shapes (the export's rule: evolve.export picks with this)."""
    ok = [c for c in candidates if c.correct and (c.heldout_correct or not need_heldout)]
    return min(ok, key=rank) if ok else None


def session_rates(evaluations: int | None, wall_s: float | None, workers: int | None,
                  correctness_busy_s: float | None, timing_busy_s: float | None, gpus: int = 1) -> dict[str, Any]:
    """A searching command's evaluations per minute and the shares of its wall time the GPUs'
    measuring turns (None: no GPU; mean over `gpus`) and the correctness workers, all together,
    were busy."""
    wall = max(wall_s or 0.0, 1e-9)
    return {"per_min": 60 * (evaluations or 0) / wall,
            "timing_busy": None if timing_busy_s is None else timing_busy_s / (wall * max(gpus or 1, 1)),
            "correctness_busy": (correctness_busy_s or 0.0) / (wall * max(workers or 1, 1))}


# a shorter steady state is not worth a rate of its own (the closing line and the report leave it out)
STEADY_MIN_S = 20.0


def steady_rate(evaluations: int | None, seconds: float | None) -> float | None:
    """Evaluations per minute of a session's steady state (evolve.progress.Tracker.steady: once every
    task had its first evaluation back); None without one, or one under STEADY_MIN_S."""
    if not evaluations or not seconds or seconds < STEADY_MIN_S:
        return None
    return 60 * evaluations / seconds


def aa_noise(speedups: list[float]) -> tuple[float, float] | None:
    """(median, p90) of |A/A - 1| over A/A sentinel timings (the starting kernel against itself);
    None without any."""
    dev = sorted(abs(x - 1.0) for x in speedups if x)
    if not dev:
        return None
    p90 = dev[min(len(dev) - 1, math.ceil(0.9 * len(dev)) - 1)]
    return statistics.median(dev), p90
