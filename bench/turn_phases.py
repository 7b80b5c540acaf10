"""Where the GPU's measuring turn went in a run: per timed evaluation, the seconds it held the
turn (timing_exclusive_s) and its steps (baseline_open / baseline_prepare / sets / trials /
checks), summed and as medians, first timing of each task apart from the rest; then each A/A
sentinel's shapes (both sides' times, trials and spreads), to see what a stray one measured.

    python bench/turn_phases.py ARCHIVE.db
"""
from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fitness.common.timing_row import rows_from_dicts  # noqa: E402


def rows(path: str) -> list[tuple[str, dict]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    q = ("SELECT c.task, e.verdict FROM evaluations e JOIN candidates c ON c.id = e.candidate_id "
         "ORDER BY e.created")
    out = []
    for task, verdict in db.execute(q):
        phases = json.loads(verdict or "{}").get("phases") or {}
        if "timing_exclusive_s" in phases:
            out.append((task, phases))
    return out


def table(label: str, group: list[dict]) -> None:
    if not group:
        print(f"{label}: none")
        return
    held = [p["timing_exclusive_s"] for p in group]
    steps: dict[str, float] = {}
    for p in group:
        for k, x in (p.get("turn") or {}).items():
            steps[k] = steps.get(k, 0.0) + x
    parts = ", ".join(f"{k} {x:.1f} s" for k, x in sorted(steps.items(), key=lambda kv: -kv[1]))
    print(f"{label}: {len(group)} timings, turn held {sum(held):.1f} s in all, median {statistics.median(held):.3f} s, "
          f"max {max(held):.3f} s; steps: {parts}")


def sentinels(path: str) -> None:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    if not db.execute("SELECT name FROM sqlite_master WHERE name = 'sentinels'").fetchone():
        return
    for task, speedup, verdict in db.execute("SELECT task, speedup, verdict FROM sentinels ORDER BY id"):
        v = json.loads(verdict or "{}")
        print(f"A/A sentinel {task}: {speedup}; flags {v.get('flags')}; {v.get('timing', '')}")
        for r in rows_from_dicts(v.get("times") or []):
            print(f"    {r.shape} {r.dtype}: candidate {r.candidate_ms:.4f} ms "
                  f"(spread {r.candidate_spread:.3f}, {r.trials} trials), baseline "
                  f"{r.baseline_ms:.4f} ms (spread {r.baseline_spread:.3f}, {r.baseline_trials} "
                  f"trials, kept {r.baseline_kept}), {r.method}, {r.input_sets} sets")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    seen: set[str] = set()
    first, later = [], []
    for task, phases in rows(argv[0]):
        (later if task in seen else first).append(phases)
        seen.add(task)
    table("first timing of each task", first)
    table("later timings", later)
    sentinels(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
