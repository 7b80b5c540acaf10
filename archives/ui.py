"""`run.py ui`: the archive in Datasette (the `ui` extra), read-only, with every table and column
described and canned queries (best kernels, a kernel's lineage, failures by reason).

The metadata is generated here from archives.records' schema (the columns a reader may see),
so a column added there without a description fails tests/test_ui.py instead of going
undocumented. A live archive is opened as Datasette opens any mutable file (SQLite mode=ro:
WAL lets it read the last commit while the search writes); a finished one, whose WAL has been
checkpointed away, as immutable (no locking, counts computed once).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from archives import records as rec
from archives.report_data import ReportError, check_schema, connect_ro

TABLES: dict[str, tuple[str, dict[str, type]]] = {
    "meta": ("The tool that wrote the file and its schema version.", {"key": str, "value": str}),
    "runs": ("One row per search; --fresh starts another run in the same file.", rec.RUN_COLUMNS),
    "candidates": ("Every kernel an operator made, and each task's starting kernel (operator 'start').",
                   rec.CANDIDATE_COLUMNS),
    "evaluations": ("What the evaluator found of each candidate (one per candidate).", rec.EVALUATION_COLUMNS),
    "populations": ("Each island's members after each finished generation (what a resume starts from).",
                    rec.POPULATION_COLUMNS),
    "llm_calls": ("One row per LLM call made (or answer imported from a Batch API file).", rec.LLM_COLUMNS),
    "llm_requests": ("Every request written for --llm-exchange, with the job it was made for; its answer "
                     "is matched to that job on any machine.", rec.REQUEST_COLUMNS),
    "sessions": ("One row per command that searched (a resumed run has several): its throughput.",
                 rec.SESSION_COLUMNS),
    "sentinels": ("A/A sentinels: a task's starting kernel timed against itself during the search.",
                  rec.SENTINEL_COLUMNS),
}

_ID = "row id"
_WHEN = "Unix time (seconds) it was written"
COLUMN_DOCS: dict[str, dict[str, str]] = {
    "meta": {"key": "tool or schema_version", "value": "its value"},
    "runs": {"id": _ID, "suite": "the suite searched (builtin, tritonbench, rocm, kernelbench)",
             "config": "JSON: the run's options (islands, population, generations, operators, ...)",
             "started": "Unix time the run started", "updated": "Unix time of its last status change",
             "status": "running, finished, stopped (time limit), interrupted, waiting (LLM exchange) or "
                       "failed (the model could not be used)"},
    "candidates": {
        "id": _ID, "run_id": "the run (runs.id)", "task": "the task's name in its suite",
        "island": "the island that made it; -1: the starting kernel, which every island holds",
        "generation": "the generation that made it (0: the start and its first mutants)",
        "source": "the kernel's Python source", "code_hash": "hash of the source with comments and layout "
        "removed: a kernel already made in the run is not evaluated again",
        "parent_ids": "JSON list of parent candidate ids (the first is the one mutated; crossover has two)",
        "operator": "what made it: start, knob_mutation, knob_crossover, llm_mutate, llm_crossover, llm_generate, "
        "llm_repair",
        "note": "what the operator said it changed", "created": _WHEN},
    "evaluations": {
        "id": _ID, "candidate_id": "the candidate (candidates.id)",
        "stage": "the last stage reached: none (failed the static gate), parse (import/compile error), compile "
        "(crashed when run), call (ran, wrong output), correct, timed",
        "correct": "1: matched the reference on every tuning shape",
        "heldout_correct": "1: matched on the held-out shapes too (never shown to the search)",
        "passed": "1: correct on tuning and held-out shapes (the bar for fitness and export)",
        "speedup": "baseline time / kernel time, geometric mean over the timed tuning shapes; null: not timed",
        "error": "why it failed ('' when it passed)", "device": "the GPU (or CPU) it ran on",
        "times": "JSON: per timed shape (fitness.common.timing_row.TimingRow), shape, dtype, candidate_ms, "
        "baseline_ms, spreads, method, trials, bytes, flops, floor_ms, speedup",
        "flags": "JSON list: untimed-no-gpu, timing-failed, noisy-timing, faster-than-roofline, ...",
        "verdict": "JSON: the evaluator's full verdict (cases, timing, sandbox, phases)",
        "elapsed_s": "seconds the evaluation took", "created": _WHEN},
    "populations": {"run_id": "the run", "task": "the task", "island": "the island",
                    "generation": "the generation just finished", "members": "JSON list of candidate ids",
                    "created": _WHEN},
    "llm_calls": {
        "id": _ID, "run_id": "the run", "candidate_id": "the candidate its answer became (null: none)",
        "task": "the task", "operator": "the LLM operator", "island": "the island", "generation": "the generation",
        "model": "the model asked", "request_hash": "hash of the request: a stored answer is never asked again",
        "messages": "JSON: the prompt", "response": "the model's answer, stored before it is used",
        "response_chars": "length of the answer", "prompt_tokens": "tokens in", "completion_tokens": "tokens out",
        "cost_usd": "its price, where the model's is known", "latency_s": "seconds to answer",
        "attempts": "tries it took", "error": "why the call failed ('' when it did not)",
        "parse_error": "why no kernel could be read from the answer", "source": "the kernel read from it",
        "slot": "JSON: the job it answers (task, operator, island, generation, parents, seed, turn)",
        "parent_ids": "JSON list of the parents it was asked about",
        "used_for": "the request its answer was handed to ('' while unused)", "created": _WHEN},
    "llm_requests": {
        "request_hash": "hash of the request body", "run_id": "the run", "task": "the task",
        "operator": "the LLM operator", "island": "the island", "generation": "the generation",
        "slot": "JSON: the job it was made for", "parent_ids": "JSON list of its parents",
        "body": "the request as written to requests.jsonl", "created": _WHEN},
    "sessions": {
        "id": _ID, "run_id": "the run", "started": "Unix time the command started", "wall_s": "its search wall time",
        "evaluations": "evaluations it recorded", "workers": "correctness workers",
        "correctness_busy_s": "the correctness workers' summed serving time",
        "timing_busy_s": "time the GPU's measuring turn was held (null: no GPU)", "status": "how the command ended",
        "aa_n": "A/A sentinels timed", "aa_median": "median of |A/A - 1|", "aa_p90": "p90 of |A/A - 1|",
        "gpus": "GPUs timing in the session", "units": "JSON: each evaluation unit's work (under --cluster)",
        "steady_evaluations": "evaluations after every task's first one came back (the steady state)",
        "steady_s": "seconds from the steady state's start to the command's end"},
    "sentinels": {"id": _ID, "run_id": "the run", "task": "the task", "speedup": "A/A speedup (1.0 is no noise)",
                  "verdict": "JSON: the sentinel's verdict", "created": _WHEN},
}

# the one definition of a failure's coarse class (stages: fitness.engine.verdict.STAGES, the last one reached)
FAILURE_CLASS = """case
      when e.flags like '%"timing-failed"%' then 'timing failed'
      when lower(e.error) like '%timed out%' then 'timeout (hang)'
      when lower(e.error) like '%out of memory%' then 'out of memory'
      when e.stage = 'none' then 'static gate'
      when e.error like 'replay:%' then 'replay check'
      when e.stage = 'parse' then 'import or compile error'
      when e.stage = 'compile' then 'crash when run'
      when e.stage = 'call' then 'wrong result (tuning shapes)'
      when e.correct and not e.heldout_correct then 'wrong result (held-out shapes)'
      else 'other' end"""

QUERIES: dict[str, dict[str, str]] = {
    "best_kernels": {
        "title": "Best kernel per task",
        "description": "Per run and task, the fastest kernel correct on the tuning and the held-out shapes "
                       "(the export's choice: untimed ranks as 0, ties go to the oldest).",
        "sql": """select run_id, task, candidate_id, operator, island, generation, speedup, flags, note
from (select c.run_id, c.task, c.id as candidate_id, c.operator, c.island, c.generation, e.speedup, e.flags, c.note,
             row_number() over (partition by c.run_id, c.task order by coalesce(e.speedup, 0) desc, c.id) as rank
      from candidates c join evaluations e on e.candidate_id = c.id
      where e.correct and e.heldout_correct)
where rank = 1 order by run_id, task"""},
    "lineage": {
        "title": "Lineage of a kernel",
        "description": "The kernel's first-parent chain back to the task's starting kernel, the start first "
                       "(a crossover's other parents are in parent_ids).",
        "sql": """with recursive chain(id, depth) as (
  select cast(:candidate_id as integer), 0
  union all
  select json_extract(c.parent_ids, '$[0]'), chain.depth + 1
  from chain join candidates c on c.id = chain.id
  where json_array_length(c.parent_ids) > 0 and chain.depth < 10000
)
select chain.depth, c.id as candidate_id, c.operator, c.note, e.stage, e.speedup, c.generation, c.island,
       c.parent_ids
from chain join candidates c on c.id = chain.id left join evaluations e on e.candidate_id = c.id
order by chain.depth desc"""},
    "failures_by_reason": {
        "title": "Failures by reason",
        "description": "Evaluations that did not pass, by coarse class (from the stage reached, the flags and "
                       "the error), with an example error.",
        "sql": f"""select class, count(*) as evaluations, count(distinct task) as tasks,
       group_concat(distinct task) as task_names, substr(min(error), 1, 300) as example_error
from (select c.task, e.error, {FAILURE_CLASS} as class
      from evaluations e join candidates c on c.id = e.candidate_id where not e.passed)
group by class order by evaluations desc, class"""},
}


def metadata(database: str) -> dict[str, Any]:
    """Datasette metadata for an archive served under the name `database` (its file's stem)."""
    tables = {}
    for name, (description, columns) in TABLES.items():
        docs = COLUMN_DOCS[name]
        tables[name] = {"description": description, "columns": {c: docs[c] for c in columns}}
        if "id" in columns:
            tables[name]["sort_desc"] = "id"
    return {"title": "triton-evolve archive",
            "description": "Every run, candidate kernel and evaluation of an evolutionary search "
                           "(read-only). Canned queries: best kernels, a kernel's lineage, failures by reason.",
            # copies: Datasette adds keys to the queries it is given
            "databases": {database: {"tables": tables, "queries": {k: dict(q) for k, q in QUERIES.items()}}}}


def live(path: Path) -> bool:
    """Whether a search may still write to the archive: a run marked running, or a WAL not yet
    checkpointed away (immutable mode would not read it)."""
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return True
    conn = connect_ro(path)
    try:
        check_schema(conn, path)
        running = conn.execute("select count(*) from runs where status = ?", [rec.RunStatus.RUNNING.value])
        return running.fetchone()[0] > 0
    finally:
        conn.close()


def datasette_args(path: Path, metadata_file: Path, host: str, port: int, is_live: bool) -> list[str]:
    """The `datasette serve` command line for the archive."""
    files = [str(path)] if is_live else ["-i", str(path)]
    return ["serve", *files, "--metadata", str(metadata_file), "--host", host, "--port", str(port),
            "--setting", "truncate_cells_html", "400", "--setting", "sql_time_limit_ms", "5000"]


def cmd_ui(archive: str, host: str = "127.0.0.1", port: int = 8001, metadata_out: str | None = None) -> int:
    """The CLI: serves the archive until Ctrl-C; with `metadata_out`, writes the metadata JSON
    there and prints the datasette command instead. Exit 2 with one line for bad input."""
    path = Path(archive)
    try:
        is_live = live(path)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    meta = json.dumps(metadata(path.stem), indent=1)
    if metadata_out:
        try:
            Path(metadata_out).write_text(meta)
        except OSError as e:
            print(f"error: cannot write the metadata to {metadata_out}: {e.strerror or e}", file=sys.stderr)
            return 2
        print("datasette " + " ".join(datasette_args(path, Path(metadata_out), host, port, is_live)))
        return 0
    try:
        import datasette  # noqa: F401 - only to say how to install it
    except ImportError:
        print("error: datasette is not installed: pip install -e '.[ui]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        meta_file = Path(tmp) / "metadata.json"
        meta_file.write_text(meta)
        mode = "live: read-only, re-read on each page" if is_live else "finished: immutable"
        print(f"serving {path} ({mode}) at http://{host}:{port}/{path.stem} (Ctrl-C stops)", flush=True)
        try:
            return subprocess.run([sys.executable, "-m", "datasette",
                                   *datasette_args(path, meta_file, host, port, is_live)]).returncode
        except KeyboardInterrupt:
            return 0
