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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from archives.archive import Archive
from archives.metrics import best_kernel, rank
from archives.records import Candidate
from evolve.cli_options import program
from fitness.common.flags import Flag
from fitness.engine.launch_configs import KernelConfig
from fitness.engine.verdict import geomean, untimeable_start

HEADER = "# triton-evolve export:"
Retimer = Callable[[str, str], "float | None"]


def choose(candidates: list[Candidate]) -> tuple[Candidate | None, list[Candidate]]:
    """(the best held-out-correct candidate, the faster ones passed over for failing held-out)."""
    best = best_kernel(candidates, need_heldout=True)
    passed_over = sorted((c for c in candidates if c.correct and not c.heldout_correct
                          and (best is None or rank(c) < rank(best))), key=rank)
    return best, passed_over


def _header(suite: str, best: Candidate, entry: dict[str, Any], check_cmd: str, configs: list[KernelConfig]) -> str:
    if entry.get("speedup"):
        measured = f"speedup {entry['speedup']:.3f}x vs {entry['baseline']} on {best.device}"
        if entry.get("search_speedup"):
            measured += f" (timed again alone at export; {entry['search_speedup']:.3f}x during the search)"
    else:
        measured = f"not timed ({best.device or 'no GPU'}): correct on the tuning and held-out shapes"
    # an autotuner in another process may pick another config: the one timed, to pin it
    timed = "".join(f"# timed build: {c.build()}{' on ' + ', '.join(c.shapes) if c.shapes else ''}\n"
                    for c in configs)
    return (f"{HEADER} suite {suite}, task {best.task}: candidate {best.id} "
            f"(island {best.island}, generation {best.generation}, {best.operator})\n"
            f"# measured: {measured}\n{timed}"
            f"# reproduce: {check_cmd}\n")


def _retime(entry: dict[str, Any], retime: Retimer, best: Candidate, start: Candidate | None) -> None:
    again = retime(best.task, best.source)
    if again is None:
        entry["retime_note"] = "timing again at export failed: the search's measurement is kept"
        return
    entry.update(search_speedup=best.speedup, speedup=again)
    if start is not None and start.speedup:
        entry["search_start_speedup"] = start.speedup
        entry["start_speedup"] = again if start.id == best.id else (retime(best.task, start.source)
                                                                     or start.speedup)


def _entry(name: str, evaluated: list[Candidate], passed_over: list[Candidate], start: Candidate | None,
           best: Candidate | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"task": name, "evaluations": len(evaluated),
                             "status": "no correct kernel" if evaluated else "not started",
                             "passed_over_heldout": [{"candidate": c.id, "speedup": c.speedup} for c in passed_over]}
    if evaluated and all(Flag.INVALID_HERE in c.flags for c in evaluated):
        entry["status"] = "invalid-here"  # the suite's reference fails on this machine
    if start is not None:
        entry["start_speedup"] = start.speedup
        why = untimeable_start(start.flags, start.error) if best is None else ""
        if why:
            entry["note"] = why
    return entry


def _export_task(archive: Archive, run_id: int, name: str, out: Path, where: Where) -> dict[str, Any]:
    evaluated = [c for c in archive.candidates(run_id, name) if c.evaluated]
    # the instruction setting measures what the LLM wrote: the given starting kernel is no answer
    best, passed_over = choose([c for c in evaluated if not (where.setting == "instruction" and c.operator == "start")])
    start = next((c for c in evaluated if c.operator == "start"), None)
    entry = _entry(name, evaluated, passed_over, start, best)
    path = out / f"{name}.py"
    if best is None:
        if path.exists() and path.read_text(errors="replace").startswith(HEADER):
            path.unlink()  # an earlier run's export: this run has no kernel to stand behind it
        return entry
    # the command as the user runs it: `triton-evolve check` once installed
    cmd = [*program().split(), "check", "--suite", where.suite]
    if where.suite_path:
        cmd += ["--suite-path", str(where.suite_path)]
    cmd += ["--task", name, str(path)]
    verdict = archive.candidate(best.id).evaluation.verdict()  # type: ignore[union-attr]
    baseline = verdict.get("baseline", "baseline")
    configs = KernelConfig.all_from_verdict(verdict)
    entry.update(status="exported", file=str(path), candidate=best.id, speedup=best.speedup, baseline=baseline,
                 device=best.device, island=best.island, generation=best.generation, operator=best.operator)
    if where.retime and best.speedup:
        _retime(entry, where.retime, best, start)
    if entry["speedup"] and entry.get("start_speedup"):
        entry["vs_start"] = entry["speedup"] / entry["start_speedup"]
    path.write_text(_header(where.suite, best, entry, shlex.join(cmd), configs) + best.source)
    if passed_over:
        entry["note"] = f"{len(passed_over)} faster candidate(s) failed held-out shapes and were not exported"
    return entry


@dataclass(frozen=True)
class Where:
    suite: str
    suite_path: str | None
    retime: Retimer | None
    setting: str = "optimize"


def export(archive: Archive, run_id: int, suite: str, task_names: list[str], out_dir: str | Path,
           suite_path: str | None = None, retime: Retimer | None = None) -> dict[str, Any]:
    """`retime(task, source)`: a fresh speedup measurement, None when it could not be taken."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run = archive.run(run_id)
    where = Where(suite, suite_path, retime, run.config.get("setting", "optimize") if run else "optimize")
    entries = [_export_task(archive, run_id, name, out, where) for name in task_names]
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
