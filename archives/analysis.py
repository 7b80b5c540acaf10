"""From the archive's rows to the report's figures: per task, per suite, per difficulty and per
category, and the scaling series (against generation, against the number of islands).

Rules (stated in the report as well):
- The task's starting kernel (operator 'start', island -1) is given, not generated: it is left out
  of call/execution accuracy and pass@k, but is a candidate for the best kernel (it is what the
  user has without a search), as in the export.
- Best kernel: the fastest candidate correct on the tuning AND the held-out shapes (the export's
  choice); its speedup, SOL% and achieved rates are the task's.
- Held-out generalization: the search steers on the tuning shapes only, so its own pick is the
  fastest tuning-correct kernel; the task generalizes when that kernel is also correct on the
  held-out shapes. Suite figure: P(held-out correct | tuning correct) over tasks that have one.
- pass@k: each island of a task is an independent run (islands differ in their seed; migrants
  are the only exchange); a run succeeds when it made a correct kernel (tuning shapes).
- Setting (the run's --setting): in `instruction` (GEAK's) the LLM wrote every kernel from the
  instruction, so the starting kernel is no candidate for the best kernel either. GEAK's task
  figures: call accuracy = share of tasks with a generated kernel that ran; execution accuracy =
  share of tasks solved (the exported kernel passes the tuning and held-out shapes).
- Suite accuracies are the mean over tasks of the per-task rates (each task weighs the same),
  with the pooled rate over all generated candidates beside them.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from archives import metrics as m
from archives.records import Candidate
from archives.report_data import ReportData

CALLED = ("call", "correct", "timed")  # stage "call": every case ran, some output was wrong


def _generated(rows: list[Candidate]) -> list[Candidate]:
    return [r for r in rows if r.evaluated and r.operator != "start"]


def setting(config: dict[str, Any]) -> str:
    return str(config.get("setting") or "optimize")  # runs from before the option were optimize runs


def task_summary(rows: list[Candidate], islands: int, given_start: bool = True) -> dict[str, Any]:
    """Figures of one task from its candidates (already restricted to what should count);
    `given_start`: the starting kernel may be the best kernel (False in the instruction setting)."""
    evaluated = [r for r in rows if r.evaluated]
    gen = _generated(rows)
    best = m.best_kernel(evaluated if given_start else gen, need_heldout=True)
    pick = m.best_kernel(evaluated if given_start else gen, need_heldout=False)
    start = next((r for r in evaluated if r.operator == "start"), None)
    successes = {r.island for r in gen if r.correct}
    fast_islands = {r.island for r in gen if r.correct and (r.speedup or 0) > 1.0}
    timed_any = any(r.speedup is not None for r in evaluated)
    out: dict[str, Any] = {
        "evaluated": len(evaluated), "pending": len(rows) - len(evaluated), "generated": len(gen),
        "called": sum(r.stage in CALLED for r in gen), "correct": sum(r.correct for r in gen),
        "call_accuracy": m.rate(sum(r.stage in CALLED for r in gen), len(gen)),
        "exec_accuracy": m.rate(sum(r.correct for r in gen), len(gen)),
        "tuning_correct_generated": sum(r.correct for r in gen),
        "heldout_of_tuning_correct": sum(r.correct and r.heldout_correct for r in gen),
        "solved": best is not None, "ran": any(r.stage in CALLED for r in gen),
        "best": _kernel(best), "search_pick": _kernel(pick),
        "generalizes": None if pick is None else pick.heldout_correct,
        "speedup": best.speedup if best else None,
        "start_speedup": start.speedup if start else None,
        "islands": islands, "islands_correct": len(successes & set(range(islands))),
        "islands_fast": len(fast_islands & set(range(islands))) if timed_any else None,
        "max_generation": max((r.generation for r in rows), default=None),
    }
    out["vs_start"] = (out["speedup"] / out["start_speedup"]
                       if out["speedup"] and out["start_speedup"] else None)
    out["pass_at_k"] = {k: m.pass_at_k(islands, out["islands_correct"], k) if islands else None for k in m.PASS_K}
    out["fast1_at_k"] = {k: (m.pass_at_k(islands, out["islands_fast"], k)
                             if islands and out["islands_fast"] is not None else None) for k in m.PASS_K}
    times = list(best.times) if best else []
    out["sol"] = m.sol_fraction(times) if times else None
    out["achieved"] = m.achieved(times) if times else None
    return out


def _kernel(c: Candidate | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"id": c.id, "island": c.island, "generation": c.generation, "operator": c.operator,
            "speedup": c.speedup, "correct": c.correct, "heldout_correct": c.heldout_correct, "stage": c.stage,
            "device": c.device}


def group_summary(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """Suite-level figures over counted task summaries (invalid ones already removed)."""
    pairs = [(t["solved"], t["speedup"]) for t in tasks]
    picks = [t for t in tasks if t["generalizes"] is not None]
    gen = sum(t["generated"] for t in tasks)
    solved_sp = [t["speedup"] for t in tasks if t["solved"] and t["speedup"] is not None]
    sols = [t["sol"] for t in tasks if t["sol"] is not None]
    return {
        "tasks": len(tasks),
        "solved": sum(t["solved"] for t in tasks),
        # GEAK's accuracies, over tasks: a generated kernel ran; the exported kernel passes
        "task_call_accuracy": m.rate(sum(t["ran"] for t in tasks), len(tasks)),
        "task_exec_accuracy": m.rate(sum(t["solved"] for t in tasks), len(tasks)),
        "call_accuracy": m.mean(t["call_accuracy"] for t in tasks if t["call_accuracy"] is not None),
        "exec_accuracy": m.mean(t["exec_accuracy"] for t in tasks if t["exec_accuracy"] is not None),
        "call_accuracy_pooled": m.rate(sum(t["called"] for t in tasks), gen),
        "exec_accuracy_pooled": m.rate(sum(t["correct"] for t in tasks), gen),
        "generated": gen,
        "speedup": m.speedup_stats(pairs),
        "speedup_solved_only": {"geomean": m.geomean(solved_sp), "mean": m.mean(solved_sp),
                                "median": m.median(solved_sp), "n": len(solved_sp)},
        "fast_p": {p: m.fast_p(pairs, p) for p in m.FAST_P},
        "pass_at_k": {k: m.mean(t["pass_at_k"][k] for t in tasks if t["pass_at_k"][k] is not None)
                      for k in m.PASS_K},
        "fast1_at_k": {k: m.mean(t["fast1_at_k"][k] for t in tasks if t["fast1_at_k"][k] is not None)
                       for k in m.PASS_K},
        "sol": {"geomean": m.geomean(sols), "median": m.median(sols), "n": len(sols)},
        "heldout_generalization": m.rate(sum(t["generalizes"] for t in picks), len(picks)),
        "heldout_generalization_n": len(picks),
        "heldout_pooled": m.rate(sum(t["heldout_of_tuning_correct"] for t in tasks),
                                 sum(t["tuning_correct_generated"] for t in tasks)),
    }


def _islands(data: ReportData) -> int:
    n = data.run.config.get("islands")
    if isinstance(n, int) and n > 0:
        return n
    seen = {r.island for rows in data.rows.values() for r in rows if r.island >= 0}
    return max(seen) + 1 if seen else 0


def _groups(counted: dict[str, dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[str, dict]:
    groups: dict[str, list[dict]] = {}
    for t in counted.values():
        groups.setdefault(str(key(t)), []).append(t)
    return {g: group_summary(ts) for g, ts in sorted(groups.items())}


def scaling(data: ReportData, counted: list[str], islands: int) -> dict[str, list[dict[str, Any]]]:
    """Sequential scaling (everything up to generation g) and parallel scaling (the first j
    islands, all generations, with the starting kernel that every island holds)."""
    last = max((r.generation for t in counted for r in data.rows.get(t, [])), default=-1)
    given = setting(data.run.config) != "instruction"
    seq = []
    for g in range(last + 1):
        sums = [task_summary([r for r in data.rows[t] if r.generation <= g], islands, given) for t in counted]
        now = [r for t in counted for r in _generated(data.rows[t]) if r.generation == g]
        seq.append({"generation": g, **_point(group_summary(sums)),
                    "exec_accuracy_this_generation": m.rate(sum(r.correct for r in now), len(now)),
                    "call_accuracy_this_generation": m.rate(sum(r.stage in CALLED for r in now), len(now)),
                    "evaluated_this_generation": len(now)})
    par = []
    for j in range(1, islands + 1):
        sums = [task_summary([r for r in data.rows[t] if r.island < j], j, given) for t in counted]
        par.append({"islands": j, **_point(group_summary(sums))})
    return {"by_generation": seq, "by_islands": par}


def _point(g: dict[str, Any]) -> dict[str, Any]:
    return {"geomean_speedup": g["speedup"]["geomean"], "solved_share": m.rate(g["solved"], g["tasks"]),
            "exec_accuracy": g["exec_accuracy"], "call_accuracy": g["call_accuracy"],
            "fast_1": g["fast_p"][1.0]}


def llm_per_task(data: ReportData, tasks: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task: its LLM calls and tokens against its best speedup (what the calls bought)."""
    out: dict[str, dict[str, Any]] = {}
    for c in data.llm_calls:
        name = c.get("task") or "?"
        t = out.setdefault(name, {"task": name, "calls": 0, "tokens": 0,
                                  "speedup": (tasks.get(name) or {}).get("speedup")})
        t["calls"] += 1
        t["tokens"] += (c.get("prompt_tokens") or 0) + (c.get("completion_tokens") or 0)
    return [out[k] for k in sorted(out)]


def llm_summary(data: ReportData, tasks: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    calls = data.llm_calls
    if not calls:
        return {"calls": 0}
    return {"calls": len(calls), "per_task": llm_per_task(data, tasks or {}),
            "errors": sum(bool(c.get("error")) for c in calls),
            "prompt_tokens": sum(c.get("prompt_tokens") or 0 for c in calls),
            "completion_tokens": sum(c.get("completion_tokens") or 0 for c in calls),
            "latency_s": sum(c.get("latency_s") or 0.0 for c in calls),
            "models": sorted({c.get("model") or "?" for c in calls})}


def session_summary(data: ReportData) -> list[dict[str, Any]]:
    """Each searching command's throughput, the share of its wall time the workers were busy
    (timing: the GPU's measuring turn; correctness: all correctness workers together), and its
    A/A sentinels' noise (evolve.sentinels)."""
    return [{"id": s["id"], "started": s.get("started"), "wall_s": s.get("wall_s"), "evaluations": s.get("evaluations"),
             "workers": s.get("workers"), "status": s.get("status"), "aa_n": s.get("aa_n"),
             "aa_median": s.get("aa_median"), "aa_p90": s.get("aa_p90"),
             "units": unit_rates(s),
             "steady_per_min": m.steady_rate(s.get("steady_evaluations"), s.get("steady_s")),
             **m.session_rates(s.get("evaluations"), s.get("wall_s"), s.get("workers"), s.get("correctness_busy_s"),
                               s.get("timing_busy_s"), s.get("gpus") or 1)}
            for s in data.sessions]


def unit_rates(session: dict[str, Any]) -> list[dict[str, Any]]:
    """Per evaluation unit (one per GPU under --cluster) of a session: its device, evaluations per
    minute of the session's wall time, and how busy its measuring turn and workers were."""
    try:
        units = json.loads(session.get("units") or "[]")
    except ValueError:
        return []
    return [{"unit": u["unit"], "device": u["device"], "evaluations": u["evaluations"],
             **m.session_rates(u["evaluations"], session.get("wall_s"), u["workers"], u["correctness_busy_s"],
                               u["measuring_s"] if u["gpu"] else None)} for u in units]


def cost_curve(data: ReportData, counted: list[str]) -> list[dict[str, Any]]:
    """Cumulative LLM tokens against the geometric-mean best speedup reached by then, one point
    per evaluation in time order (an unsolved task counts 1.0, as in the suite figure)."""
    if not data.llm_calls:
        return []
    calls = sorted((c.get("created") or 0.0, (c.get("prompt_tokens") or 0) + (c.get("completion_tokens") or 0))
                   for c in data.llm_calls)
    evals = sorted(((r.evaluation.created or 0.0, r.id), t, r) for t in counted for r in data.rows.get(t, [])
                   if r.evaluation is not None)
    best: dict[str, float | None] = {t: None for t in counted}
    out, tokens, i = [], 0, 0
    for when, task, r in evals:
        while i < len(calls) and calls[i][0] <= when[0]:
            tokens += calls[i][1]
            i += 1
        if r.correct and r.heldout_correct and r.speedup is not None:
            best[task] = max(best[task] or 0.0, r.speedup)
        if any(v is not None for v in best.values()):
            out.append({"tokens": tokens, "geomean_speedup": m.geomean(v or 1.0 for v in best.values())})
    return out


def analyze(data: ReportData) -> dict[str, Any]:
    islands = _islands(data)
    tasks = {}
    for name in sorted(data.rows):
        info = data.tasks.get(name)
        t = {"task": name, "category": info.category if info else "unknown",
             "difficulty": info.difficulty if info else None,
             **task_summary(data.rows[name], islands, setting(data.run.config) != "instruction")}
        tasks[name] = t
    counted = {n: t for n, t in tasks.items() if n not in data.invalid}
    run = data.run
    return {
        "archive": data.path, "setting": setting(run.config),
        "run": {"id": run.id, "suite": run.suite, "status": run.status,
                                      "config": run.config, "started": run.started, "updated": run.updated,
                                      "runs_in_archive": data.runs_in_archive},
        "live": run.status == "running",
        # runs.updated moves only at start and end; the rows say when the run last wrote
        "last_write": max([run.updated or 0.0] + [max(r.created or 0.0, r.evaluation.created or 0.0 if r.evaluation
                                                      else 0.0) for rows in data.rows.values() for r in rows]),
        "read_at": data.read_at, "tasks_source": data.tasks_source, "islands": islands,
        "devices": sorted({r.device for rows in data.rows.values() for r in rows if r.device}),
        "timed": any(t["speedup"] is not None for t in counted.values()),
        "sessions": session_summary(data),
        "tasks": list(tasks.values()),
        "invalid": [{"task": n, "reason": why} for n, why in sorted(data.invalid.items())],
        "suite": group_summary(list(counted.values())),
        "by_difficulty": _groups(counted, lambda t: t["difficulty"] if t["difficulty"] is not None else "unknown"),
        "by_category": _groups(counted, lambda t: t["category"]),
        "scaling": scaling(data, list(counted), islands),
        "llm": llm_summary(data, tasks),
        "cost_curve": cost_curve(data, list(counted)),
    }
