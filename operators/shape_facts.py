"""What a kernel engineer reads off one timed shape: which inputs stand behind it, how far from
the roofline the kernel runs there, whether launch overhead bounds it, and its speedup against a
baseline time that holds still across the run (a timing's own baseline wanders with the GPU's
clocks, so attempts timed at different moments would not compare).

A timing row is the evaluator's per-shape record (fitness.common.timing_row.TimingRow: made by
fitness/engine/trials.py `timed_row`, its `floor_ms` set by fitness/engine/verdict.py `speedup_from_rows`)."""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from fitness.common.timing_row import TimingRow
from fitness.engine.verdict import geomean

LAUNCH_BOUND_MS = 0.010  # under ~10 us a call's time is mostly launch overhead


def shape_of(shape: dict | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (shape or {}).items())


def row_key(row: TimingRow) -> str:
    """The same timed shape across evaluations of a task."""
    return f"{shape_of(row.shape)}|{row.dtype}"


def row_label(row: TimingRow) -> str:
    """The shape as the prompt names it: a script task's perf index with the inputs behind it."""
    shape, dtype = shape_of(row.shape), row.dtype
    label = shape if dtype in ("", "given") else f"{shape} {dtype}"
    return f"{label} ({row.describe})" if row.describe else label


def roofline_share(row: TimingRow) -> float | None:
    """The roofline time over the kernel's time: 1.0 runs at the measured peak; None without a cost model."""
    floor, ms = row.floor_ms or 0.0, row.candidate_ms
    return floor / ms if floor > 0 and ms > 0 else None


def roofline_text(row: TimingRow) -> str:
    share = roofline_share(row)
    if share is None:
        return ""
    seconds = row.candidate_ms * 1e-3
    rates = [f"{row.bytes / seconds / 1e9:.0f} GB/s" if row.bytes else "",
             f"{row.flops / seconds / 1e12:.2f} TFLOP/s" if row.flops else ""]
    achieved = " and ".join(r for r in rates if r)
    return f"{100 * share:.0f}% of the roofline" + (f" ({achieved} achieved)" if achieved else "")


def shape_line(row: TimingRow, baseline_ms: float | None = None) -> str:
    """One timed shape: its inputs, the kernel's time against the stable baseline (the row's own
    when there is none), the roofline share, and a launch-bound mark."""
    base = baseline_ms or row.baseline_ms
    ms = row.candidate_ms
    parts = [f"{row_label(row)}: {ms:.4f} ms vs baseline {base:.4f} ms"
             + (f" ({base / ms:.2f}x)" if ms > 0 else "")]
    roof = roofline_text(row)
    if roof:
        parts.append(roof)
    if ms < LAUNCH_BOUND_MS:
        parts.append("launch-bound (under 10 us)")
    return ", ".join(parts)


def median_baselines(time_lists: Iterable[Iterable[TimingRow]]) -> dict[str, float]:
    """Per timed shape, the median of the baseline's times over the evaluations given (a run's)."""
    seen: dict[str, list[float]] = {}
    for rows in time_lists:
        for r in rows:
            if r.baseline_ms:
                seen.setdefault(row_key(r), []).append(float(r.baseline_ms))
    return {k: statistics.median(v) for k, v in seen.items()}


def stable_speedup(rows: Sequence[TimingRow], baselines: dict[str, float]) -> float | None:
    """Geometric mean of the stable baseline over the kernel's time per shape; None when untimed."""
    return geomean((baselines.get(row_key(r)) or r.baseline_ms) / r.candidate_ms
                   for r in rows if r.candidate_ms)
