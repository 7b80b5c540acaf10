"""Read what a report needs from an archive, read-only, whether the run has finished or is still
writing (WAL lets a reader see the last committed state while the writer goes on).

Every problem that stops a report (no file, not SQLite, another tool's database, another schema
version, no run) is a ReportError with a one-line message for the user.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from archives import records as rec
from archives.records import Candidate, Run
from fitness.common.flags import Flag


class ReportError(Exception):
    """Nothing can be reported from this input; the message is one line meant for the user."""


@dataclass
class TaskInfo:
    name: str
    category: str = "unknown"
    difficulty: int | None = None


@dataclass
class ReportData:
    path: str
    run: Run
    runs_in_archive: int
    rows: dict[str, list[Candidate]]  # task -> its candidates, oldest first (evaluation None where pending)
    tasks: dict[str, TaskInfo]
    tasks_source: str  # where category/difficulty came from
    invalid: dict[str, str]  # task -> why it is invalid here
    llm_calls: list[dict[str, Any]]  # rows of the llm_calls table (archives.records.LLM_COLUMNS)
    populations: dict[str, int]  # task -> last finished generation
    # one per command that searched, oldest first (archives.records.SESSION_COLUMNS)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    read_at: float = field(default_factory=time.time)


def connect_ro(path: str | Path) -> sqlite3.Connection:
    path = Path(path)
    if not path.exists():
        raise ReportError(f"no archive at {path}")
    if not path.is_file():
        raise ReportError(f"{path} is not a file")
    with open(path, "rb") as f:
        head = f.read(16)
    if not head:
        raise ReportError(f"{path} is an empty file: no run has written to it yet")
    if head != b"SQLite format 3\x00":
        raise ReportError(f"{path} is not an SQLite database")
    try:
        # mode=ro: never creates, never writes, never takes the writer's lock
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=10)
        conn.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.DatabaseError as e:
        if Path(f"{path}-wal").exists():
            raise ReportError(f"cannot read the archive {path}: {e}") from None
        # a finished WAL archive in a read-only folder: ro needs to create -shm; nothing writes to
        # it any more, so it can be read as immutable
        try:
            conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro&immutable=1", uri=True)
            conn.execute("select count(*) from sqlite_master").fetchone()
        except sqlite3.DatabaseError as e2:
            raise ReportError(f"{path} is not a readable SQLite database ({e2})") from None
    conn.row_factory = sqlite3.Row
    return conn


def check_schema(conn: sqlite3.Connection, path: str | Path) -> None:
    """The archive's own schema check (archives.records), as a ReportError; an empty database
    is no archive to report on."""
    if not conn.execute("select name from sqlite_master where type='table'").fetchall():
        raise ReportError(f"{path} is an empty SQLite database: no run has written to it yet")
    problem = rec.schema_problem(conn)
    if problem:
        tail = ": report it with the triton-evolve version that wrote it" if "schema version" in problem else ""
        raise ReportError(f"{path} {problem}{tail}")


def read_invalid_file(path: str | Path) -> dict[str, str]:
    """Tasks invalid on this hardware, from JSON: a list of names, {name: reason}, {"invalid": [...]}
    or the output of `run.py validate --json` (verdicts whose flags hold 'invalid-here')."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ReportError(f"no file of invalid tasks at {path}") from None
    except (OSError, ValueError) as e:
        raise ReportError(f"cannot read the invalid-tasks file {path}: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("invalid"), list):
        data = data["invalid"]
    if isinstance(data, dict):
        return {str(k): str(v or "invalid here") for k, v in data.items()}
    if not isinstance(data, list):
        raise ReportError(f"{path}: expected a JSON list or object of invalid tasks")
    out = {}
    for item in data:
        if isinstance(item, str):
            out[item] = "invalid here (listed in the invalid-tasks file)"
        elif isinstance(item, dict) and (item.get("task") or item.get("name")):
            if "flags" in item and Flag.INVALID_HERE not in item["flags"]:
                continue  # a verdict of a task that is valid here
            out[item.get("task") or item["name"]] = item.get("reason") or "invalid here"
        else:
            raise ReportError(f"{path}: cannot read {item!r} as an invalid task")
    return out


def _task_infos(suite: str, suite_path: str | None, names: Iterable[str]) -> tuple[dict[str, TaskInfo], str]:
    try:
        from suites.registry import load_suite

        loaded = load_suite(suite, suite_path)
    except Exception as e:  # noqa: BLE001 - any failure to load the suite only costs the breakdowns
        return {n: TaskInfo(n) for n in names}, f"suite {suite!r} not loadable here ({str(e).splitlines()[0][:120]})"
    infos = {}
    for n in names:
        t = loaded.get(n)
        infos[n] = TaskInfo(n, t.category, t.difficulty) if t else TaskInfo(n)
    return infos, f"suite {suite!r}"


def _pick_run(conn: sqlite3.Connection, path: str | Path, run_id: int | None) -> tuple[Run, int]:
    runs = [rec.run_from_row(r) for r in conn.execute("select * from runs order by id")]
    if not runs:
        raise ReportError(f"{path} holds no run yet (an empty archive)")
    if run_id is None:
        return runs[-1], len(runs)
    run = next((r for r in runs if r.id == run_id), None)
    if run is None:
        raise ReportError(f"{path} has no run {run_id} (runs: {', '.join(str(r.id) for r in runs)})")
    return run, len(runs)


def _read_run(conn: sqlite3.Connection, run_id: int) -> tuple[dict[str, list[Candidate]], list[dict[str, Any]],
                                                              dict[str, int], list[dict[str, Any]]]:
    """A run's candidates by task, LLM calls, last generation per task and sessions, in one
    snapshot: a writer's later commits cannot make the candidates and evaluations disagree."""
    rows: dict[str, list[Candidate]] = {}
    conn.execute("begin")
    for r in conn.execute(rec.candidates_query("c.run_id = ?"), [run_id]):
        rows.setdefault(r["task"], []).append(rec.candidate_from_row(r))
    tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    llm, pops, sessions = [], {}, []
    # all columns, whichever there are: an archive from before the LLM operators has the
    # reserved table, empty, with fewer of them (a search adds them; a report writes nothing)
    if "llm_calls" in tables and "run_id" in {r[1] for r in conn.execute("pragma table_info(llm_calls)")}:
        llm = [dict(r) for r in conn.execute("select * from llm_calls where run_id = ? order by id", [run_id])]
    if "populations" in tables:
        pops = {r[0]: r[1] for r in conn.execute(
            "select task, max(generation) from populations where run_id = ? group by task", [run_id])}
    if "sessions" in tables:
        sessions = [dict(r) for r in conn.execute("select * from sessions where run_id = ? order by id", [run_id])]
    conn.execute("commit")
    return rows, llm, pops, sessions


def load(path: str | Path, run_id: int | None = None, invalid: dict[str, str] | None = None,
         load_tasks: bool = True) -> ReportData:
    conn = connect_ro(path)
    try:
        check_schema(conn, path)
        run, runs_in_archive = _pick_run(conn, path, run_id)
        rows, llm, pops, sessions = _read_run(conn, run.id)
    except sqlite3.DatabaseError as e:
        raise ReportError(f"cannot read the archive {path}: {e}") from None
    finally:
        conn.close()
    bad = dict(invalid or {})
    for task, task_rows in rows.items():
        if task not in bad and any(Flag.INVALID_HERE in r.flags for r in task_rows):
            bad[task] = "an evaluation was flagged invalid-here"
    names = sorted(set(rows) | set(bad))
    if load_tasks:
        infos, source = _task_infos(run.suite, run.config.get("suite_path"), names)
    else:
        infos, source = {n: TaskInfo(n) for n in names}, "the archive (suite not loaded)"
    return ReportData(path=str(path), run=run, runs_in_archive=runs_in_archive, rows=rows, tasks=infos,
                      tasks_source=source, invalid=bad, llm_calls=llm, populations=pops, sessions=sessions)
