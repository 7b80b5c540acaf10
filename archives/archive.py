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
            error, parse_error, source, slot, parent_ids, used_for)   one row per LLM call actually
            made (or answer imported from a Batch API file); `response` is stored before it is
            used, and a request whose hash has a stored response is never sent again; `slot` names
            the job asked for (no words of the prompt), so another machine's request for that job
            finds it, and `used_for` the request it was handed to (null: not used yet)
  llm_requests(request_hash, run_id, task, operator, island, generation, slot, parent_ids, body,
               device, created)   one row per request queued for an --llm-exchange round, stored
           when it is written out: an answer that comes back is matched to it by its custom_id,
           whatever machine reads the answer, and stored with its request's text and place
  retired_evaluations(... the evaluations columns ..., retired, retired_for)   evaluations made on
           another device, set aside (never deleted) when a resume re-times a run here (--retime)
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
from typing import TYPE_CHECKING, Any

import sqlite_utils

from archives import records as rec
from archives.records import SCHEMA_VERSION, TOOL, Candidate, Draft, Run

if TYPE_CHECKING:
    from fitness.engine.verdict import Verdict

__all__ = ["Archive", "ArchiveError", "stored_run", "SCHEMA_VERSION", "TOOL"]


class ArchiveError(Exception):
    """The archive cannot be used as asked; the message is meant for the user."""


def _check_existing(path: Path) -> None:
    """Read-only checks before anything writes to a file that already exists."""
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
        # SQLite would say the file is not a database (it cannot make its journal beside it)
        raise ArchiveError(f"{path} is read-only, or its folder is: a search writes to its archive; copy it "
                           "somewhere writable, or give another --archive (report and ui read it as it is)")
    with open(path, "rb") as f:
        head = f.read(16)
    if head and head != b"SQLite format 3\x00":
        raise ArchiveError(f"{path} is not an SQLite database: refusing to touch it")
    if not head:
        return
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            problem = rec.schema_problem(conn)
            ok = conn.execute("pragma quick_check").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise ArchiveError(f"{path} is not a readable SQLite database ({e}): refusing to touch it") from None
    if ok != "ok":
        raise ArchiveError(f"{path} is corrupt (quick_check: {ok}): refusing to touch it")
    if problem:
        raise ArchiveError(f"{path} {problem}: give another --archive path (or the triton-evolve version "
                           "that made it)")


def stored_run(path: str | os.PathLike) -> Run | None:
    """The latest run in an existing archive, read without writing to it (None: no file yet, or
    no run in it): what a resume starts from, before anything is decided."""
    path = Path(path)
    if not path.exists():
        return None
    if not path.is_file():
        raise ArchiveError(f"{path} is not a file")
    _check_existing(path)
    if path.stat().st_size == 0:
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("select * from runs order by id desc limit 1").fetchone()
    except sqlite3.Error:  # a file this version would set up, holding no run yet
        return None
    finally:
        conn.close()
    return rec.run_from_row(row) if row else None


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

    def close(self) -> None:
        self.db.conn.close()

    def prepare_to_write(self) -> None:
        """Creates what this version writes to and the archive lacks; the same for a new archive
        and for one made by an earlier version (e.g. before the LLM operators or sessions)."""
        if self._ready:
            return
        db = self.db
        with db.conn:
            db.table("meta").insert_all([{"key": "tool", "value": TOOL},
                                   {"key": "schema_version", "value": str(SCHEMA_VERSION)}],
                                  pk="key", ignore=True)
            db.table("runs").create(rec.RUN_COLUMNS, pk="id", if_not_exists=True)
            db.table("candidates").create(rec.CANDIDATE_COLUMNS, pk="id", foreign_keys=[("run_id", "runs", "id")],
                                    if_not_exists=True)
            db.table("evaluations").create(rec.EVALUATION_COLUMNS, pk="id",
                                     foreign_keys=[("candidate_id", "candidates", "id")], if_not_exists=True)
            db.table("populations").create(rec.POPULATION_COLUMNS, pk=("run_id", "task", "island", "generation"),
                                     if_not_exists=True)
            db.table("llm_calls").create(rec.LLM_COLUMNS, pk="id", if_not_exists=True)
            db.table("llm_requests").create(rec.REQUEST_COLUMNS, pk="request_hash", if_not_exists=True)
            db.table("sessions").create(rec.SESSION_COLUMNS, pk="id", foreign_keys=[("run_id", "runs", "id")],
                                  if_not_exists=True)
            db.table("sentinels").create(rec.SENTINEL_COLUMNS, pk="id", foreign_keys=[("run_id", "runs", "id")],
                                   if_not_exists=True)
            # archives made by earlier versions lack these columns (the LLM table was reserved empty)
            for table, columns in (("llm_calls", rec.LLM_COLUMNS), ("sessions", rec.SESSION_COLUMNS)):
                for name, kind in columns.items():
                    if name not in db.table(table).columns_dict:
                        db.table(table).add_column(name, kind)
            db.table("llm_calls").create_index(["request_hash"], if_not_exists=True)
            db.table("llm_calls").create_index(["run_id", "slot"], if_not_exists=True)
            db.table("candidates").create_index(["run_id", "task", "code_hash"], if_not_exists=True)
            db.table("candidates").create_index(["run_id", "task", "island", "generation"], if_not_exists=True)
            db.table("evaluations").create_index(["candidate_id"], unique=True, if_not_exists=True)
        self._ready = True

    def _insert(self, table: str, row: dict[str, Any]) -> int:
        pk = self.db.table(table).insert(row).last_pk
        assert isinstance(pk, int), pk  # every table the engine inserts into has an integer key
        return pk

    # -- runs -----------------------------------------------------------------------------
    def latest_run(self) -> Run | None:
        rows = list(self.db.query("select * from runs order by id desc limit 1"))
        return rec.run_from_row(rows[0]) if rows else None

    def run(self, run_id: int) -> Run | None:
        rows = list(self.db.query("select * from runs where id = ?", [run_id]))
        return rec.run_from_row(rows[0]) if rows else None

    def new_run(self, suite: str, config: dict) -> int:
        now = time.time()
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                return self._insert("runs", {"suite": suite, "config": json.dumps(config, sort_keys=True),
                                             "started": now, "updated": now, "status": rec.RunStatus.RUNNING.value})

    def set_config(self, run_id: int, config: dict) -> None:
        """A resumed run's settings as this session has them (extended, or its workers changed)."""
        with self.lock, self.db.conn:
            self.db.table("runs").update(run_id, {"config": json.dumps(config, sort_keys=True)})

    def set_status(self, run_id: int, status: rec.RunStatus) -> None:
        with self.lock, self.db.conn:
            self.db.table("runs").update(run_id, {"status": status.value, "updated": time.time()})

    def add_session(self, run_id: int, stats: dict) -> int:
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                return self._insert("sessions", {"run_id": run_id, **stats})

    def add_sentinel(self, run_id: int, task: str, speedup: float | None, verdict: dict) -> None:
        """An A/A sentinel: the task's starting kernel timed against itself during the search."""
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                self.db.table("sentinels").insert({"run_id": run_id, "task": task, "speedup": speedup,
                                             "verdict": json.dumps(verdict), "created": time.time()})

    def sentinel_speedups(self, run_id: int, since: float = 0.0) -> list[float]:
        if not self.db.table("sentinels").exists():
            return []
        return [r["speedup"] for r in self.db.query(
            "select speedup from sentinels where run_id = ? and created >= ? and speedup is not null order by id",
            [run_id, since])]

    def sessions(self, run_id: int) -> list[dict]:
        if not self.db.table("sessions").exists():
            return []
        return list(self.db.query("select * from sessions where run_id = ? order by id", [run_id]))

    # -- candidates and evaluations --------------------------------------------------------
    def add_candidate(self, draft: Draft) -> Candidate:
        with self.lock, self.db.conn:
            cid = self._insert("candidates", draft.row(time.time()))
        return self.candidate(cid)

    def add_evaluation(self, candidate_id: int, verdict: Verdict) -> int:
        v = verdict
        row = {"candidate_id": candidate_id, "stage": v.stage, "correct": int(v.correct),
               "heldout_correct": int(v.heldout_correct), "passed": int(v.passed), "speedup": v.speedup,
               "error": "" if v.passed else v.reason, "times": json.dumps([r.to_dict() for r in v.times]),
               "device": v.device, "flags": json.dumps(v.flags), "verdict": json.dumps(v.to_dict()),
               "elapsed_s": v.elapsed_s, "created": time.time()}
        with self.lock, self.db.conn:
            return self._insert("evaluations", row)

    def candidates(self, run_id: int, task: str, island: int | None = None,
                   generation: int | None = None) -> list[Candidate]:
        """The task's candidates with their evaluations, oldest first."""
        where, params = "c.run_id = ? and c.task = ?", [run_id, task]
        if island is not None:
            where += " and c.island = ?"
            params.append(island)
        if generation is not None:
            where += " and c.generation = ?"
            params.append(generation)
        with self.lock:
            return [rec.candidate_from_row(r) for r in self.db.query(rec.candidates_query(where), params)]

    def candidate(self, candidate_id: int) -> Candidate:
        """One candidate, its evaluation's full verdict included."""
        with self.lock:
            rows = list(self.db.query(rec.candidates_query("c.id = ?", verdicts=True), [candidate_id]))
        if not rows:
            raise KeyError(candidate_id)
        return rec.candidate_from_row(rows[0])

    def evaluation_count(self, run_id: int, task: str) -> int:
        with self.lock:
            return self.db.execute("select count(*) from evaluations e join candidates c on c.id = e.candidate_id "
                                   "where c.run_id = ? and c.task = ?", [run_id, task]).fetchone()[0]

    # -- devices -----------------------------------------------------------------------------
    def evaluation_devices(self, run_id: int) -> dict[str, int]:
        """How many of the run's evaluations each device made, by the name its verdicts give."""
        with self.lock:
            return {r[0] or "": r[1] for r in self.db.execute(
                "select e.device, count(*) from evaluations e join candidates c on c.id = e.candidate_id "
                "where c.run_id = ? group by e.device order by e.device", [run_id]).fetchall()}

    def retire_evaluations(self, run_id: int, devices: list[str], retired_for: str) -> int:
        """Moves the run's evaluations made on `devices` into retired_evaluations, in one
        transaction: their candidates read as unevaluated, and a kept one is evaluated again."""
        marks = ",".join("?" * len(devices))
        where = (f"candidate_id in (select id from candidates where run_id = ?) and device in ({marks})")
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                self.db.table("retired_evaluations").create(
                    {**rec.EVALUATION_COLUMNS, "retired": float, "retired_for": str}, pk="id", if_not_exists=True)
                columns = ", ".join(rec.EVALUATION_COLUMNS)
                n = self.db.execute(f"insert into retired_evaluations ({columns}, retired, retired_for) select "
                                    f"{columns}, ?, ? from evaluations where {where}",
                                    [time.time(), retired_for, run_id, *devices]).rowcount
                self.db.execute(f"delete from evaluations where {where}", [run_id, *devices])
        return n

    # -- LLM calls (the client's store) ------------------------------------------------------
    def llm_response(self, request_hash: str) -> dict | None:
        """The stored answer to this request, if one was received (failed transports don't count)."""
        with self.lock:
            rows = list(self.db.query("select id, response from llm_calls where request_hash = ? and "
                                      "response is not null and (error is null or error = '') order by id limit 1",
                                      [request_hash]))
        return rows[0] if rows else None

    def llm_answer_for_slot(self, run_id: int, slot: str) -> dict | None:
        """An answer of this run to the same job asked in other words (another machine's prompt
        names its GPU and its timings). A job drawn again (a resume) gets its one answer again,
        whose child the search then finds made already: an answer makes one child, never two."""
        with self.lock:
            rows = list(self.db.query("select id, response, request_hash from llm_calls where run_id = ? and "
                                      "slot = ? and response is not null and (error is null or error = '') "
                                      "order by id limit 1", [run_id, slot]))
        return rows[0] if rows else None

    def use_llm_call(self, call_id: int, request_hash: str, meta: dict[str, Any]) -> None:
        """A stored answer handed to the request `request_hash`: it is that request's from now on."""
        self.claim_llm_call(call_id, meta)
        with self.lock, self.db.conn:
            self.db.execute("update llm_calls set used_for = coalesce(used_for, ?) where id = ?",
                            [request_hash, call_id])

    def unused_answers(self, run_id: int, task: str, island: int, generation: int) -> list[dict]:
        """Answers stored for this island's generation that no request of the search took (its
        draws went otherwise on this machine): the search adopts them, never drops them."""
        with self.lock:
            return list(self.db.query(
                "select id, response, operator, parent_ids from llm_calls where run_id = ? and task = ? and "
                "island = ? and generation = ? and response is not null and (error is null or error = '') and "
                "used_for is null and candidate_id is null order by id", [run_id, task, island, generation]))

    def unused_answer_count(self, run_id: int) -> int:
        with self.lock:
            return self.db.execute("select count(*) from llm_calls where run_id = ? and response is not null and "
                                   "(error is null or error = '') and used_for is null and candidate_id is null",
                                   [run_id]).fetchone()[0]

    def add_llm_request(self, row: dict[str, Any]) -> None:
        """A request written out for an exchange round (the same request asked again keeps its row)."""
        with self.lock:
            self.prepare_to_write()
            with self.db.conn:
                self.db.table("llm_requests").insert({k: v for k, v in row.items() if k in rec.REQUEST_COLUMNS},
                                                      pk="request_hash", ignore=True)

    def llm_request(self, request_hash: str) -> dict | None:
        if "llm_requests" not in self.db.table_names():
            return None
        with self.lock:
            rows = list(self.db.query("select * from llm_requests where request_hash = ?", [request_hash]))
        return rows[0] if rows else None

    def has_llm_call(self, request_hash: str, source: str) -> bool:
        with self.lock:
            return self.db.execute("select 1 from llm_calls where request_hash = ? and source = ? limit 1",
                                   [request_hash, source]).fetchone() is not None

    def add_llm_call(self, row: dict[str, Any]) -> int:
        with self.lock, self.db.conn:
            kept = {k: v for k, v in row.items() if k in rec.LLM_COLUMNS}
            return self._insert("llm_calls", kept)

    def claim_llm_call(self, call_id: int, meta: dict[str, Any]) -> None:
        """A stored answer used for a request learns whose it was where it did not say: answers
        imported from an exchange file carry no task (the Batch API's lines have none), and the
        report counts calls per task."""
        with self.lock, self.db.conn:
            self.db.execute("update llm_calls set task = coalesce(task, ?), operator = coalesce(operator, ?), "
                            "island = coalesce(island, ?), generation = coalesce(generation, ?) where id = ?",
                            [meta.get("task"), meta.get("operator"), meta.get("island"), meta.get("generation"),
                             call_id])

    def note_llm_failure(self, call_id: int, parse_error: str) -> None:
        with self.lock, self.db.conn:
            self.db.table("llm_calls").update(call_id, {"parse_error": parse_error})

    def link_llm_calls(self, call_ids: list[int], candidate_id: int) -> None:
        with self.lock, self.db.conn:
            for i in call_ids:
                self.db.table("llm_calls").update(i, {"candidate_id": candidate_id})

    def llm_totals(self, run_id: int) -> tuple[int, float]:
        """(calls made, dollars spent) in this run, over all its sessions."""
        with self.lock:
            n, cost = self.db.execute("select count(*), coalesce(sum(cost_usd), 0) from llm_calls where run_id = ?",
                                      [run_id]).fetchone()
        return n, cost

    # -- populations ----------------------------------------------------------------------
    def save_generation(self, run_id: int, task: str, generation: int, islands: list[list[int]]) -> None:
        """All islands of one finished generation, in one transaction: a generation is either
        wholly recorded or not at all."""
        now = time.time()
        rows = [{"run_id": run_id, "task": task, "island": i, "generation": generation,
                 "members": json.dumps(members), "created": now} for i, members in enumerate(islands)]
        with self.lock, self.db.conn:
            self.db.table("populations").insert_all(rows, replace=True)

    def last_generation(self, run_id: int, task: str) -> tuple[int, list[list[int]]] | None:
        with self.lock:
            rows = list(self.db.query("select generation, island, members from populations where run_id = ? "
                                      "and task = ? and generation = (select max(generation) from populations "
                                      "where run_id = ? and task = ?) order by island", [run_id, task, run_id, task]))
        if not rows:
            return None
        return rows[0]["generation"], [json.loads(r["members"]) for r in rows]

