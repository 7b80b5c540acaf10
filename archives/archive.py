"""The SQLite archive: every run, candidate, evaluation and island population, written as each
completes, so a run killed at any point resumes without evaluating anything twice.

Tables (users and tests query these names):
  meta(key, value)              tool name and schema version
  runs(id, suite, config, ...)  one row per run; --fresh starts another in the same file
  candidates(id, run_id, task, island, generation, source, code_hash, parent_ids, operator, note)
  evaluations(id, candidate_id, stage, correct, heldout_correct, passed, speedup, error, times,
              device, flags, verdict)
  populations(run_id, task, island, generation, members)   an island after a finished generation
  sessions(id, run_id, started, wall_s, evaluations, workers, correctness_busy_s, timing_busy_s,
           status)   one row per command that searched (a run resumed three times has three):
           its throughput, and how busy the correctness workers and the GPU timing worker were
  llm_calls(id, run_id, candidate_id, task, operator, island, generation, model, request_hash,
            messages, response, prompt_tokens, completion_tokens, cost_usd, latency_s, attempts,
            error, parse_error, source)   one row per LLM call actually made (or answer imported
            from a Batch API file); `response` is stored before it is used, and a request whose
            hash has a stored response is never sent again
WAL mode: readers (a report, a test) never block the writer, and a kill loses at most the
write in flight. One connection, shared by the engine's threads under a lock.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import sqlite_utils

TOOL = "triton-evolve"
SCHEMA_VERSION = 1


LLM_COLUMNS = {"id": int, "run_id": int, "candidate_id": int, "task": str, "operator": str, "island": int,
               "generation": int, "model": str, "request_hash": str, "messages": str, "response": str,
               "response_chars": int, "prompt_tokens": int, "completion_tokens": int, "cost_usd": float,
               "latency_s": float, "attempts": int, "error": str, "parse_error": str, "source": str,
               "created": float}


SESSION_COLUMNS = {"id": int, "run_id": int, "started": float, "wall_s": float, "evaluations": int, "workers": int,
                   "correctness_busy_s": float, "timing_busy_s": float, "status": str,
                   # A/A sentinels timed during the session: how many, median and p90 of |A/A - 1|
                   "aa_n": int, "aa_median": float, "aa_p90": float,
                   # GPUs timing in the session, and each evaluation unit's work (JSON list of
                   # fitness.evaluator.UnitStats): per-device throughput under --cluster
                   "gpus": int, "units": str}
SENTINEL_COLUMNS = {"id": int, "run_id": int, "task": str, "speedup": float, "verdict": str, "created": float}


class ArchiveError(Exception):
    """The archive cannot be used as asked; the message is meant for the user."""


def _check_existing(path: Path):
    """Read-only checks before anything writes to a file that already exists."""
    with open(path, "rb") as f:
        head = f.read(16)
    if head and head != b"SQLite format 3\x00":
        raise ArchiveError(f"{path} is not an SQLite database: refusing to touch it")
    if not head:
        return
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
            meta = dict(conn.execute("select key, value from meta")) if "meta" in tables else {}
            ok = conn.execute("pragma quick_check").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise ArchiveError(f"{path} is not a readable SQLite database ({e}): refusing to touch it") from None
    if ok != "ok":
        raise ArchiveError(f"{path} is corrupt (quick_check: {ok}): refusing to touch it")
    if tables and meta.get("tool") != TOOL:
        raise ArchiveError(f"{path} is an SQLite database of another tool (no triton-evolve meta table): "
                           "give another --archive path")
    if meta and meta.get("schema_version") != str(SCHEMA_VERSION):
        raise ArchiveError(f"{path} has archive schema version {meta.get('schema_version')}; this triton-evolve "
                           f"reads version {SCHEMA_VERSION}: use a matching version or another --archive path")


class Archive:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.exists():
            if not self.path.is_file():
                raise ArchiveError(f"{self.path} is not a file")
            _check_existing(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
            self.db = sqlite_utils.Database(conn)
            self.db.enable_wal()
            # an existing archive is brought up to date (tables, columns and indexes added since
            # it was made) only by a command that was accepted: a refused one leaves its bytes
            self._ready = False
            if "runs" not in self.db.table_names():
                self.prepare_to_write()
        except (OSError, sqlite3.Error) as e:
            raise ArchiveError(f"cannot write the archive at {self.path}: {e}") from None
        self.lock = threading.RLock()

    def close(self):
        self.db.conn.close()

    def prepare_to_write(self):
        """Creates what this version writes to and the archive lacks; the same for a new archive
        and for one made by an earlier version (e.g. before the LLM operators or sessions)."""
        if self._ready:
            return
        db = self.db
        with db.conn:
            db["meta"].insert_all([{"key": "tool", "value": TOOL},
                                   {"key": "schema_version", "value": str(SCHEMA_VERSION)}],
                                  pk="key", ignore=True)
            db["runs"].create({"id": int, "suite": str, "config": str, "started": float, "updated": float,
                               "status": str}, pk="id", if_not_exists=True)
            db["candidates"].create({"id": int, "run_id": int, "task": str, "island": int, "generation": int,
                                     "source": str, "code_hash": str, "parent_ids": str, "operator": str,
                                     "note": str, "created": float},
                                    pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
            db["evaluations"].create({"id": int, "candidate_id": int, "stage": str, "correct": int,
                                      "heldout_correct": int, "passed": int, "speedup": float, "error": str,
                                      "times": str, "device": str, "flags": str, "verdict": str,
                                      "elapsed_s": float, "created": float},
                                     pk="id", foreign_keys=[("candidate_id", "candidates", "id")],
                                     if_not_exists=True)
            db["populations"].create({"run_id": int, "task": str, "island": int, "generation": int,
                                      "members": str, "created": float},
                                     pk=("run_id", "task", "island", "generation"), if_not_exists=True)
            db["llm_calls"].create(LLM_COLUMNS, pk="id", if_not_exists=True)
            db["sessions"].create(SESSION_COLUMNS, pk="id", foreign_keys=[("run_id", "runs", "id")],
                                  if_not_exists=True)
            db["sentinels"].create(SENTINEL_COLUMNS, pk="id", foreign_keys=[("run_id", "runs", "id")],
                                   if_not_exists=True)
            # archives made by earlier versions lack these columns (the LLM table was reserved empty)
            for table, columns in (("llm_calls", LLM_COLUMNS), ("sessions", SESSION_COLUMNS)):
                for name, kind in columns.items():
                    if name not in db[table].columns_dict:
                        db[table].add_column(name, kind)
            db["llm_calls"].create_index(["request_hash"], if_not_exists=True)
            db["candidates"].create_index(["run_id", "task", "code_hash"], if_not_exists=True)
            db["candidates"].create_index(["run_id", "task", "island", "generation"], if_not_exists=True)
            db["evaluations"].create_index(["candidate_id"], unique=True, if_not_exists=True)
        self._ready = True

    # -- runs -----------------------------------------------------------------------------
    def latest_run(self) -> dict | None:
        rows = list(self.db.query("select * from runs order by id desc limit 1"))
        if not rows:
            return None
        return {**rows[0], "config": json.loads(rows[0]["config"])}

    def new_run(self, suite: str, config: dict) -> int:
        now = time.time()
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                return self.db["runs"].insert({"suite": suite, "config": json.dumps(config, sort_keys=True),
                                               "started": now, "updated": now, "status": "running"}).last_pk

    def set_status(self, run_id: int, status: str):
        with self.lock, self.db.conn:
            self.db["runs"].update(run_id, {"status": status, "updated": time.time()})

    def add_session(self, run_id: int, stats: dict) -> int:
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                return self.db["sessions"].insert({"run_id": run_id, **stats}).last_pk

    def add_sentinel(self, run_id: int, task: str, speedup: float | None, verdict: dict) -> None:
        """An A/A sentinel: the task's starting kernel timed against itself during the search."""
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                self.db["sentinels"].insert({"run_id": run_id, "task": task, "speedup": speedup,
                                             "verdict": json.dumps(verdict), "created": time.time()})

    def sentinel_speedups(self, run_id: int, since: float = 0.0) -> list[float]:
        if not self.db["sentinels"].exists():
            return []
        return [r["speedup"] for r in self.db.query(
            "select speedup from sentinels where run_id = ? and created >= ? and speedup is not null order by id",
            [run_id, since])]

    def sessions(self, run_id: int) -> list[dict]:
        if not self.db["sessions"].exists():
            return []
        return list(self.db.query("select * from sessions where run_id = ? order by id", [run_id]))

    # -- candidates and evaluations --------------------------------------------------------
    def add_candidate(self, run_id: int, task: str, island: int, generation: int, source: str, code_hash: str,
                      parent_ids: list[int], operator: str, note: str = "") -> int:
        with self.lock, self.db.conn:
            return self.db["candidates"].insert({
                "run_id": run_id, "task": task, "island": island, "generation": generation, "source": source,
                "code_hash": code_hash, "parent_ids": json.dumps(parent_ids), "operator": operator,
                "note": note, "created": time.time()}).last_pk

    def add_evaluation(self, candidate_id: int, verdict: dict) -> int:
        row = {"candidate_id": candidate_id, "stage": verdict.get("stage"),
               "correct": int(bool(verdict.get("correct"))),
               "heldout_correct": int(bool(verdict.get("heldout_correct"))),
               "passed": int(bool(verdict.get("passed"))), "speedup": verdict.get("speedup"),
               "error": "" if verdict.get("passed") else verdict.get("reason", ""),
               "times": json.dumps(verdict.get("times", [])), "device": verdict.get("device", ""),
               "flags": json.dumps(verdict.get("flags", [])), "verdict": json.dumps(verdict),
               "elapsed_s": verdict.get("elapsed_s"), "created": time.time()}
        with self.lock, self.db.conn:
            return self.db["evaluations"].insert(row).last_pk

    def candidates(self, run_id: int, task: str, island: int | None = None,
                   generation: int | None = None) -> list[dict]:
        """Candidates with their evaluation's columns (None where not evaluated yet), oldest first."""
        where, params = "c.run_id = ? and c.task = ?", [run_id, task]
        if island is not None:
            where += " and c.island = ?"
            params.append(island)
        if generation is not None:
            where += " and c.generation = ?"
            params.append(generation)
        sql = (f"select c.*, e.id as evaluation_id, e.stage, e.correct, e.heldout_correct, e.passed, e.speedup, "
               f"e.error, e.device, e.flags, e.times from candidates c left join evaluations e "
               f"on e.candidate_id = c.id where {where} order by c.id")
        with self.lock:
            return [_decode(r) for r in self.db.query(sql, params)]

    def candidate(self, candidate_id: int) -> dict:
        with self.lock:
            rows = list(self.db.query(
                "select c.*, e.id as evaluation_id, e.stage, e.correct, e.heldout_correct, e.passed, e.speedup, "
                "e.error, e.device, e.flags, e.times, e.verdict from candidates c left join evaluations e "
                "on e.candidate_id = c.id where c.id = ?", [candidate_id]))
        if not rows:
            raise KeyError(candidate_id)
        return _decode(rows[0])

    def evaluation_count(self, run_id: int, task: str) -> int:
        with self.lock:
            return self.db.execute("select count(*) from evaluations e join candidates c on c.id = e.candidate_id "
                                   "where c.run_id = ? and c.task = ?", [run_id, task]).fetchone()[0]

    # -- LLM calls (the client's store) ------------------------------------------------------
    def llm_response(self, request_hash: str) -> dict | None:
        """The stored answer to this request, if one was received (failed transports don't count)."""
        with self.lock:
            rows = list(self.db.query("select id, response from llm_calls where request_hash = ? and "
                                      "response is not null and (error is null or error = '') order by id limit 1",
                                      [request_hash]))
        return rows[0] if rows else None

    def has_llm_call(self, request_hash: str, source: str) -> bool:
        with self.lock:
            return self.db.execute("select 1 from llm_calls where request_hash = ? and source = ? limit 1",
                                   [request_hash, source]).fetchone() is not None

    def add_llm_call(self, row: dict) -> int:
        with self.lock, self.db.conn:
            return self.db["llm_calls"].insert({k: v for k, v in row.items() if k in LLM_COLUMNS}).last_pk

    def note_llm_failure(self, call_id: int, parse_error: str):
        with self.lock, self.db.conn:
            self.db["llm_calls"].update(call_id, {"parse_error": parse_error})

    def link_llm_calls(self, call_ids: list[int], candidate_id: int):
        with self.lock, self.db.conn:
            for i in call_ids:
                self.db["llm_calls"].update(i, {"candidate_id": candidate_id})

    def llm_totals(self, run_id: int) -> tuple[int, float]:
        """(calls made, dollars spent) in this run, over all its sessions."""
        with self.lock:
            n, cost = self.db.execute("select count(*), coalesce(sum(cost_usd), 0) from llm_calls where run_id = ?",
                                      [run_id]).fetchone()
        return n, cost

    # -- populations ----------------------------------------------------------------------
    def save_generation(self, run_id: int, task: str, generation: int, islands: list[list[int]]):
        """All islands of one finished generation, in one transaction: a generation is either
        wholly recorded or not at all."""
        now = time.time()
        rows = [{"run_id": run_id, "task": task, "island": i, "generation": generation,
                 "members": json.dumps(members), "created": now} for i, members in enumerate(islands)]
        with self.lock, self.db.conn:
            self.db["populations"].insert_all(rows, replace=True)

    def last_generation(self, run_id: int, task: str) -> tuple[int, list[list[int]]] | None:
        with self.lock:
            rows = list(self.db.query("select generation, island, members from populations where run_id = ? "
                                      "and task = ? and generation = (select max(generation) from populations "
                                      "where run_id = ? and task = ?) order by island", [run_id, task, run_id, task]))
        if not rows:
            return None
        return rows[0]["generation"], [json.loads(r["members"]) for r in rows]


def _decode(row: dict) -> dict:
    row = dict(row)
    for key in ("parent_ids", "flags", "times"):
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key])
    for key in ("correct", "heldout_correct", "passed"):
        if row.get(key) is not None:
            row[key] = bool(row[key])
    return row
