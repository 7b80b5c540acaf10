"""Each task's best kernel as the report shows it: its source, its diff against the task's
starting kernel, the lineage that led to it and its per-shape times, from the archive's records
(no I/O here: archives.report reads, archives.kernel_view renders).

The best kernel is the export's choice (archives.metrics.best_kernel with need_heldout): what a
user of the run would take away. Its lineage follows each candidate's first parent (a crossover's
other parents are listed at their step) back to the starting kernel.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from archives import metrics
from archives.records import Candidate
from fitness.common.timing_row import TimingRow

START = "start"  # the operator of a task's starting kernel


@dataclass(frozen=True)
class KernelSection:
    """What the report says of one task's best kernel; `best` None: no kernel is correct on the
    tuning and held-out shapes (then the other fields are empty)."""

    task: str
    best: Candidate | None
    start_id: int | None  # the task's starting kernel, the diff's left side
    diff: str  # unified diff, starting kernel -> best ('' when the best is the start, or no start)
    lineage: tuple[Candidate, ...]  # starting kernel first, the best kernel last
    broken_at: int | None  # a parent id the lineage could not follow (not in this run); None: complete
    times: tuple[TimingRow, ...]  # the best kernel's timed tuning shapes
    flags: tuple[str, ...]


def lineage(best: Candidate, by_id: dict[int, Candidate]) -> tuple[tuple[Candidate, ...], int | None]:
    """The first-parent chain from the starting kernel to `best` (start first), and the parent id
    where it broke off (None when it reached a kernel without parents, normally the start)."""
    chain, seen, here = [best], {best.id}, best
    while here.parent_ids:
        parent = here.parent_ids[0]
        if parent not in by_id or parent in seen:  # a cycle cannot be written, but guard the walk
            return tuple(reversed(chain)), parent
        here = by_id[parent]
        seen.add(here.id)
        chain.append(here)
    return tuple(reversed(chain)), None


def source_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    """Unified diff of two sources ('' when equal)."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), old_name, new_name)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def shape_text(shape: dict) -> str:
    """A shape as the report names it: "N=1024, D=512"."""
    return ", ".join(f"{k}={v}" for k, v in shape.items())


def measured_speedup(row: TimingRow) -> float | None:
    """The baseline's time over the kernel's as measured, not floored at the roofline (the row's
    `speedup` is): what the report's times table shows beside the two times."""
    return row.baseline_ms / row.candidate_ms if row.candidate_ms else None


def section(task: str, rows: list[Candidate]) -> KernelSection:
    """The kernel section of one task from its candidates (any order)."""
    best = metrics.best_kernel([r for r in rows if r.evaluated], need_heldout=True)
    start = next((r for r in rows if r.operator == START), None)
    if best is None:
        return KernelSection(task, None, start.id if start else None, "", (), None, (), ())
    chain, broken = lineage(best, {r.id: r for r in rows})
    diff = source_diff(start.source, best.source, f"start #{start.id}", f"best #{best.id}") if start else ""
    return KernelSection(task=task, best=best, start_id=start.id if start else None, diff=diff, lineage=chain,
                         broken_at=broken, times=best.times, flags=best.flags)


def sections(rows: dict[str, list[Candidate]]) -> list[KernelSection]:
    """One section per task, in task order."""
    return [section(task, rows[task]) for task in sorted(rows)]


def as_json(s: KernelSection) -> dict:
    """A section for report.json: the best kernel by id, with its source."""
    b = s.best
    return {"task": s.task, "best": None if b is None else {"id": b.id, "operator": b.operator,
                                                           "speedup": b.speedup, "source": b.source},
            "start_id": s.start_id, "diff": s.diff, "broken_at": s.broken_at, "flags": list(s.flags),
            "lineage": [_step_json(c) for c in s.lineage],
            "times": [_time_json(t) for t in s.times]}


def _step_json(c: Candidate) -> dict:
    """A lineage step for report.json: a crossover's parents beyond the first, which it follows, as
    `other_parents`."""
    return {"id": c.id, "operator": c.operator, "note": c.note, "stage": c.stage, "speedup": c.speedup,
            "generation": c.generation, "island": c.island, "other_parents": list(c.parent_ids[1:])}


def _time_json(t: TimingRow) -> dict:
    """A timed shape as report.json has given it since the report's first version."""
    return {"shape": shape_text(t.shape), "dtype": t.dtype, "candidate_ms": t.candidate_ms,
            "baseline_ms": t.baseline_ms, "spread": t.candidate_spread, "speedup": measured_speedup(t)}
