"""Where a search's evaluation time went, from its archive (any machine; the numbers are the GPU's
when the search ran on one).

    python bench/time_breakdown.py --archive runs/builtin.db [--run N] [--session K]

Per task and overall: the median and the sum, over evaluations, of each phase its verdict
recorded. Engine side: `worker_s` (waiting for a correctness worker, the worker's handling and
the trip through the pipe), `reference_compare_s` (float64 references and the comparison),
`replay_s` (each call replayed alone in a fresh child), and the timing: `timing_prepare_s` (a
replay child forked, CUDA started, kernels loaded, inputs drawn: overlaps other candidates),
`timing_wait_s` (waiting for the measuring turn) and `timing_exclusive_s` (the turn itself: the
GPU's exclusive time). Worker side (`worker_ms`): `import`, `first_case` (Triton compiles on
the first launch), `other_cases`, and within the cases `inputs` and `to_host`. Per timed
shape: `warm_up` and `baseline_warm_up` (summed over the shapes of an evaluation). With
--session, only the evaluations made during that searching command (see the archive's sessions
table). Not a test: quote its output.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fitness.common.timing_row import rows_from_dicts  # noqa: E402


def phases(verdict: dict) -> dict[str, float]:
    """One evaluation's phases, in seconds, flattened."""
    out = {}
    for key, value in (verdict.get("phases") or {}).items():
        if isinstance(value, dict):
            out.update({f"worker.{k}": v / 1e3 for k, v in value.items()})
        elif isinstance(value, (int, float)):
            out[key] = value
    timing = defaultdict(float)
    for row in rows_from_dicts(verdict.get("times") or []):
        for k, v in row.phase_ms.items():
            timing[f"timing.{k}"] += v / 1e3
    return {**out, **timing}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", required=True)
    p.add_argument("--run", type=int, help="run id (default: the latest)")
    p.add_argument("--session", type=int, help="only this session's evaluations (its id in `sessions`)")
    args = p.parse_args(argv)
    try:
        conn = sqlite3.connect(f"file:{args.archive}?mode=ro", uri=True)
        run = args.run or conn.execute("select max(id) from runs").fetchone()[0]
        where, params = "c.run_id = ?", [run]
        if args.session is not None:
            s = conn.execute("select started, wall_s from sessions where id = ? and run_id = ?",
                             [args.session, run]).fetchone()
            if s is None:
                raise SystemExit(f"error: run {run} of {args.archive} has no session {args.session}")
            # a session's evaluations were recorded between its start and the end of its search
            where += " and e.created between ? and ?"
            params += [s[0], s[0] + s[1] + 1.0]
        rows = conn.execute("select c.task, e.verdict from evaluations e join candidates c on c.id = e.candidate_id "
                            f"where {where}", params).fetchall()
    except sqlite3.Error as e:
        print(f"error: cannot read {args.archive}: {e}", file=sys.stderr)
        return 2
    by_task: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for task, verdict in rows:
        for k, v in phases(json.loads(verdict or "{}")).items():
            by_task[task][k].append(v)
            by_task["(all)"][k].append(v)
    print(f"{len(rows)} evaluations of run {run} in {args.archive}" +
          (f", session {args.session}" if args.session is not None else ""))
    for task in sorted(by_task, key=lambda t: (t != "(all)", t)):
        print(f"\n{task}")
        for k, values in sorted(by_task[task].items()):
            print(f"  {k:24} n {len(values):5}  median {statistics.median(values):8.3f} s  sum {sum(values):9.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
