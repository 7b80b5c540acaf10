"""The archive's schema, the queries the engine and the report share, and the records they read.

A kernel is a `Candidate` (what an operator made: source, lineage, place in the search) with its
`Evaluation` (what the evaluator found), both frozen: the engine, the export and the report read
the same fields the same way, never a dict with `.get()` two layers away. JSON columns (parent
ids, flags, per-shape times) are decoded here and nowhere else.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Mapping

from fitness.common.timing_row import TimingRow, rows_from_dicts

TOOL = "triton-evolve"
SCHEMA_VERSION = 1

RUN_COLUMNS = {"id": int, "suite": str, "config": str, "started": float, "updated": float, "status": str}
CANDIDATE_COLUMNS = {"id": int, "run_id": int, "task": str, "island": int, "generation": int, "source": str,
                     "code_hash": str, "parent_ids": str, "operator": str, "note": str, "created": float}
EVALUATION_COLUMNS = {"id": int, "candidate_id": int, "stage": str, "correct": int, "heldout_correct": int,
                      "passed": int, "speedup": float, "error": str, "times": str, "device": str, "flags": str,
                      "verdict": str, "elapsed_s": float, "created": float}
POPULATION_COLUMNS = {"run_id": int, "task": str, "island": int, "generation": int, "members": str,
                      "created": float}
LLM_COLUMNS = {"id": int, "run_id": int, "candidate_id": int, "task": str, "operator": str, "island": int,
               "generation": int, "model": str, "request_hash": str, "messages": str, "response": str,
               "response_chars": int, "prompt_tokens": int, "completion_tokens": int, "cost_usd": float,
               "latency_s": float, "attempts": int, "error": str, "parse_error": str, "source": str,
               "created": float,
               # the job the request was made for, whatever the prompt's text (which names the GPU
               # and measured times): JSON [task, operator, island, generation, seed, messages];
               # the parents it was asked about; and the request the answer was handed to (null:
               # never used yet, "adopted": made a child without a request of this session)
               "slot": str, "parent_ids": str, "used_for": str}
# a request written out for an --llm-exchange round, kept until its answer comes back
REQUEST_COLUMNS = {"request_hash": str, "run_id": int, "task": str, "operator": str, "island": int,
                   "generation": int, "slot": str, "parent_ids": str, "body": str, "created": float}
SESSION_COLUMNS = {"id": int, "run_id": int, "started": float, "wall_s": float, "evaluations": int, "workers": int,
                   "correctness_busy_s": float, "timing_busy_s": float, "status": str,
                   # A/A sentinels timed during the session: how many, median and p90 of |A/A - 1|
                   "aa_n": int, "aa_median": float, "aa_p90": float,
                   # GPUs timing in the session, and each evaluation unit's work (JSON list of
                   # fitness.engine.evaluator.UnitStats): per-device throughput under --cluster
                   "gpus": int, "units": str,
                   # the steady state (evolve.progress.Tracker.steady): evaluations after every task's
                   # first one, and the seconds from then to the session's end
                   "steady_evaluations": int, "steady_s": float}
SENTINEL_COLUMNS = {"id": int, "run_id": int, "task": str, "speedup": float, "verdict": str, "created": float}
NEEDED = ("meta", "runs", "candidates", "evaluations")  # what any reader of an archive needs


def candidates_query(where: str, verdicts: bool = False) -> str:
    """Candidates joined with their evaluation (null columns where not evaluated yet), oldest
    first; `verdicts` adds each evaluation's full verdict JSON (large: read only where needed)."""
    return ("select c.*, e.id as evaluation_id, e.stage, e.correct, e.heldout_correct, e.passed, e.speedup, "
            "e.error, e.device, e.flags, e.times, e.created as evaluated"
            + (", e.verdict" if verdicts else "") +
            f" from candidates c left join evaluations e on e.candidate_id = c.id where {where} order by c.id")


class RunStatus(StrEnum):
    """What a command's end leaves a run as (the runs table's status); all but FINISHED resume."""

    RUNNING = "running"  # a command is searching (or died without a clean exit)
    FINISHED = "finished"
    STOPPED = "stopped"  # the time limit ended it with tasks unfinished
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM
    WAITING = "waiting"  # --llm-exchange: requests written, answers not here yet
    FAILED = "failed"  # the model or its endpoint could not serve it (no code, refused): tasks unfinished


@dataclass(frozen=True)
class Run:
    """One search in an archive (--fresh starts another in the same file)."""

    id: int
    suite: str
    config: dict[str, Any]  # the options a resume must keep, and the others it was started with
    status: str  # a RunStatus value (kept as read: an archive may hold one this version lacks)
    started: float | None = None
    updated: float | None = None


def run_from_row(row: Mapping[str, Any]) -> Run:
    try:
        config = json.loads(row["config"] or "{}")
    except ValueError:
        config = {}
    return Run(id=row["id"], suite=row["suite"], config=config if isinstance(config, dict) else {},
               status=row["status"] or "", started=row["started"], updated=row["updated"])


@dataclass(frozen=True)
class Evaluation:
    """What the evaluator found of a candidate, as the archive holds it."""

    id: int
    stage: str  # how far it got: parse, compile, call, correct, timed
    correct: bool  # on the tuning shapes
    heldout_correct: bool
    passed: bool
    speedup: float | None  # None: untimed (no GPU) or failed
    error: str  # '' when it passed
    device: str
    flags: tuple[str, ...] = ()
    times: tuple[TimingRow, ...] = ()  # per timed tuning shape: the candidate's and the baseline's times
    created: float | None = None
    verdict_json: str = ""  # the full verdict; '' where the query left it out

    def verdict(self) -> dict[str, Any]:
        return json.loads(self.verdict_json or "{}")


@dataclass(frozen=True)
class Candidate:
    """A kernel an operator made (or the task's starting kernel), and its evaluation if it has one."""

    id: int
    run_id: int
    task: str
    island: int  # -1: the starting kernel, which belongs to every island
    generation: int
    source: str
    code_hash: str
    parent_ids: tuple[int, ...]
    operator: str
    note: str
    created: float | None = None
    evaluation: Evaluation | None = field(default=None, compare=False)

    @property
    def evaluated(self) -> bool:
        return self.evaluation is not None

    @property
    def correct(self) -> bool:
        return bool(self.evaluation and self.evaluation.correct)

    @property
    def heldout_correct(self) -> bool:
        return bool(self.evaluation and self.evaluation.heldout_correct)

    @property
    def speedup(self) -> float | None:
        return self.evaluation.speedup if self.evaluation else None

    @property
    def stage(self) -> str:
        return self.evaluation.stage if self.evaluation else "none"

    @property
    def error(self) -> str:
        return self.evaluation.error if self.evaluation else ""

    @property
    def flags(self) -> tuple[str, ...]:
        return self.evaluation.flags if self.evaluation else ()

    @property
    def times(self) -> tuple[TimingRow, ...]:
        return self.evaluation.times if self.evaluation else ()

    @property
    def device(self) -> str:
        return self.evaluation.device if self.evaluation else ""


@dataclass(frozen=True)
class Draft:
    """A candidate about to be written: everything but its id and clock."""

    run_id: int
    task: str
    island: int
    generation: int
    source: str
    code_hash: str
    parent_ids: tuple[int, ...]
    operator: str
    note: str = ""

    def row(self, created: float) -> dict[str, Any]:
        return {"run_id": self.run_id, "task": self.task, "island": self.island, "generation": self.generation,
                "source": self.source, "code_hash": self.code_hash, "parent_ids": json.dumps(list(self.parent_ids)),
                "operator": self.operator, "note": self.note, "created": created}


def json_list(text: Any) -> list:
    if not isinstance(text, str):
        return list(text or [])
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def candidate_from_row(row: Mapping[str, Any]) -> Candidate:
    """A row of `candidates_query` as a record."""
    keys = row.keys()
    evaluation = None
    if row["evaluation_id"] is not None:
        evaluation = Evaluation(
            id=row["evaluation_id"], stage=row["stage"] or "none", correct=bool(row["correct"]),
            heldout_correct=bool(row["heldout_correct"]), passed=bool(row["passed"]), speedup=row["speedup"],
            error=row["error"] or "", device=row["device"] or "", flags=tuple(json_list(row["flags"])),
            times=rows_from_dicts(json_list(row["times"])), created=row["evaluated"],
            verdict_json=(row["verdict"] or "") if "verdict" in keys else "")
    return Candidate(id=row["id"], run_id=row["run_id"], task=row["task"], island=row["island"],
                     generation=row["generation"], source=row["source"], code_hash=row["code_hash"],
                     parent_ids=tuple(json_list(row["parent_ids"])), operator=row["operator"] or "",
                     note=row["note"] or "", created=row["created"], evaluation=evaluation)


def schema_problem(conn: sqlite3.Connection) -> str:
    """Why an existing SQLite database is not an archive this version reads ('' when it is);
    read-only. An empty database (no tables yet) is fine: a writer makes it an archive."""
    tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    if not tables:
        return ""
    if "meta" not in tables:
        return "is not a triton-evolve archive (an SQLite database of another tool: no meta table)"
    meta = dict(conn.execute("select key, value from meta").fetchall())
    if meta.get("tool") != TOOL:
        return f"is not a triton-evolve archive (an SQLite database of another tool: {meta.get('tool')!r})"
    version = meta.get("schema_version")
    if version != str(SCHEMA_VERSION):
        age = "an older" if str(version).isdigit() and int(str(version)) < SCHEMA_VERSION else "another"
        return f"has archive schema version {version}, {age} one than this triton-evolve reads ({SCHEMA_VERSION})"
    missing = [t for t in NEEDED if t not in tables]
    if missing:
        return f"lacks table(s) {', '.join(missing)}: not a complete triton-evolve archive"
    return ""
