"""Export the best kernel of each task from the archive: DIR/<task>.py, summary.json, summary.csv.

"Best" is the fastest candidate that passed every correctness case, held-out shapes included
(the optimizer never saw those). A faster candidate that failed a held-out shape is passed over,
and the summary names it: it is what an overfit search looks like.

On a GPU the winner (and the starting kernel) are timed once more at export, alone: during the
search the correctness workers share the GPU with the timing worker, and the best of many noisy
measurements is biased upwards (the winner's curse). The exported speedup is that second
measurement; the search's is kept beside it as `search_speedup`.
"""
from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path
from typing import Callable

from archives.archive import Archive
from fitness.verdict import geomean
from suites.validation import untimeable_start

HEADER = "# triton-evolve export:"


def _rank(row: dict) -> tuple:
    return (-(row["speedup"] or 0.0), row["id"])


def choose(rows: list[dict]) -> tuple[dict | None, list[dict]]:
    """(the best held-out-correct candidate, the faster ones passed over for failing held-out)."""
    correct = sorted((r for r in rows if r.get("correct")), key=_rank)
    best = next((r for r in correct if r.get("heldout_correct")), None)
    passed_over = [r for r in correct if not r.get("heldout_correct") and (best is None or _rank(r) < _rank(best))]
    return best, passed_over


def _header(task: str, suite: str, row: dict, entry: dict, check_cmd: str, baseline: str) -> str:
    if entry.get("speedup"):
        measured = f"speedup {entry['speedup']:.3f}x vs {baseline} on {row['device']}"
        if entry.get("search_speedup"):
            measured += f" (timed again alone at export; {entry['search_speedup']:.3f}x during the search)"
    else:
        measured = f"not timed ({row['device'] or 'no GPU'}): correct on the tuning and held-out shapes"
    return (f"{HEADER} suite {suite}, task {task}: candidate {row['id']} "
            f"(island {row['island']}, generation {row['generation']}, {row['operator']})\n"
            f"# measured: {measured}\n"
            f"# reproduce: {check_cmd}\n")


def _retime(entry: dict, retime, name: str, best: dict, start: dict | None):
    again = retime(name, best["source"])
    if again is None:
        entry["retime_note"] = "timing again at export failed: the search's measurement is kept"
        return
    entry.update(search_speedup=best["speedup"], speedup=again)
    if start is not None and start["speedup"]:
        entry["search_start_speedup"] = start["speedup"]
        entry["start_speedup"] = again if start["id"] == best["id"] else (retime(name, start["source"])
                                                                           or start["speedup"])


def export(archive: Archive, run_id: int, suite: str, task_names: list[str], out_dir: str | Path,
           suite_path: str | None = None, retime: Callable[[str, str], float | None] | None = None) -> dict:
    """`retime(task, source)`: a fresh speedup measurement, None when it could not be taken."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for name in task_names:
        rows = archive.candidates(run_id, name)
        evaluated = [r for r in rows if r.get("evaluation_id") is not None]
        best, passed_over = choose(evaluated)
        entry = {"task": name, "evaluations": len(evaluated),
                 "status": "no correct kernel" if evaluated else "not started",
                 "passed_over_heldout": [{"candidate": r["id"], "speedup": r["speedup"]} for r in passed_over]}
        if evaluated and all("invalid-here" in (r.get("flags") or "") for r in evaluated):
            entry["status"] = "invalid-here"  # the suite's reference fails on this machine
        start = next((r for r in evaluated if r["operator"] == "start"), None)
        if start is not None:
            entry["start_speedup"] = start["speedup"]
            why = untimeable_start(start.get("error") or "") if best is None else ""
            if why:
                entry["note"] = why
        path = out / f"{name}.py"
        if best is None and path.exists() and path.read_text(errors="replace").startswith(HEADER):
            path.unlink()  # an earlier run's export: this run has no kernel to stand behind it
        if best is not None:
            cmd = ["python", "run.py", "check", "--suite", suite]
            if suite_path:
                cmd += ["--suite-path", str(suite_path)]
            cmd += ["--task", name, str(path)]
            baseline = json.loads(archive.candidate(best["id"])["verdict"] or "{}").get("baseline", "baseline")
            entry.update(status="exported", file=str(path), candidate=best["id"], speedup=best["speedup"],
                         baseline=baseline, device=best["device"], island=best["island"],
                         generation=best["generation"], operator=best["operator"])
            if retime and best["speedup"]:
                _retime(entry, retime, name, best, start)
            if entry["speedup"] and entry.get("start_speedup"):
                entry["vs_start"] = entry["speedup"] / entry["start_speedup"]
            path.write_text(_header(name, suite, best, entry, shlex.join(cmd), baseline) + best["source"])
            if passed_over:
                entry["note"] = (f"{len(passed_over)} faster candidate(s) failed held-out shapes and were "
                                 "not exported")
        entries.append(entry)
    timed = [e["speedup"] for e in entries if e.get("speedup")]
    vs_start = [e["vs_start"] for e in entries if e.get("vs_start")]
    summary = {"suite": suite, "run_id": run_id, "archive": str(archive.path), "tasks": entries,
               "exported": sum(e["status"] == "exported" for e in entries),
               "geomean_speedup": geomean(timed) if timed else None,
               "geomean_vs_start": geomean(vs_start) if vs_start else None}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    fields = ["task", "status", "speedup", "search_speedup", "start_speedup", "vs_start", "baseline", "candidate",
              "island", "generation", "operator", "evaluations", "device", "file", "note"]
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(entries)
    return summary
