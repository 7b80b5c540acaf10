"""The SQLite archive: schema, WAL, refusal to touch files that are not ours, round trips."""
import sqlite3

import pytest

from archives.archive import SCHEMA_VERSION, Archive, ArchiveError
from archives.codehash import code_hash
from archives.records import LLM_COLUMNS, Draft
from fitness.engine.verdict import Verdict
from tests.timing_rows import timing_row


def test_tables_wal_and_schema_version(tmp_path):
    a = Archive(tmp_path / "a.db")
    a.close()
    conn = sqlite3.connect(tmp_path / "a.db")
    tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert {"meta", "runs", "candidates", "evaluations", "populations", "llm_calls", "sessions"} <= tables
    assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert dict(conn.execute("select key, value from meta"))["schema_version"] == str(SCHEMA_VERSION)


def test_round_trip_of_a_candidate_and_its_evaluation(tmp_path):
    a = Archive(tmp_path / "a.db")
    run = a.new_run("builtin", {"islands": 2})
    cid = a.add_candidate(Draft(run, "softmax", 0, 1, "src", "h1", (7, 8), "knob_mutation", "BLOCK 128->64")).id
    assert a.candidate(cid).evaluation is None
    a.add_evaluation(cid, Verdict("softmax", stage="timed", correct=True, heldout_correct=True, speedup=1.5,
                                  times=[timing_row({"N": 1})], device="gpu", reason="ok"))
    c = a.candidate(cid)
    assert c.evaluation is not None and c.evaluation.passed and c.speedup == 1.5 and c.parent_ids == (7, 8)
    assert c.times == (timing_row({"N": 1}),) and c.evaluation.verdict()["device"] == "gpu" and c.error == ""
    assert a.evaluation_count(run, "softmax") == 1
    with pytest.raises(sqlite3.IntegrityError):  # one evaluation per candidate, ever
        a.add_evaluation(cid, Verdict("softmax"))
    a.save_generation(run, "softmax", 0, [[cid], [cid]])
    a.save_generation(run, "softmax", 1, [[cid], []])
    assert a.last_generation(run, "softmax") == (1, [[cid], []])
    assert a.latest_run().config == {"islands": 2}


@pytest.mark.parametrize("content, message", [
    (b"hello, not a database at all", "not an SQLite database"),
    (b"SQLite format 3\x00" + b"\x00" * 200, "not a readable SQLite database"),
])
def test_a_file_that_is_not_an_archive_is_left_untouched(tmp_path, content, message):
    path = tmp_path / "x.db"
    path.write_bytes(content)
    with pytest.raises(ArchiveError, match=message):
        Archive(path)
    assert path.read_bytes() == content


def test_another_tools_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("create table things (x)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(ArchiveError, match="another tool"):
        Archive(path)
    assert path.read_bytes() == before


def test_another_schema_version_is_refused(tmp_path):
    Archive(tmp_path / "a.db").close()
    conn = sqlite3.connect(tmp_path / "a.db")
    conn.execute("update meta set value = '999' where key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(ArchiveError, match="schema version 999"):
        Archive(tmp_path / "a.db")


def test_unwritable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ArchiveError, match="cannot write the archive"):
        Archive(blocker / "sub" / "a.db")


def test_code_hash_ignores_comments_docstrings_and_layout():
    a = 'def f(x):\n    """doc"""\n    return x + 1  # add\n'
    b = "def f(x):\n\n    return (x + 1)\n"
    assert code_hash(a) == code_hash(b)
    assert code_hash(a) != code_hash("def f(x):\n    return x + 2\n")


def make_old_archive(path) -> int:
    """An archive as an earlier version left it: no sessions table, the reserved llm_calls table
    with few columns, an index missing."""
    a = Archive(path)
    run = a.new_run("builtin", {})
    a.close()
    conn = sqlite3.connect(path)
    conn.execute("drop table sessions")
    conn.execute("drop table llm_calls")
    conn.execute("create table llm_calls (id integer primary key, run_id integer, created float)")
    conn.execute("drop index idx_candidates_run_id_task_code_hash")
    conn.commit()
    conn.close()
    return run


def test_an_archive_from_an_earlier_version_is_brought_up_to_date_only_when_written(tmp_path):
    run = make_old_archive(tmp_path / "a.db")
    before = (tmp_path / "a.db").read_bytes()
    a = Archive(tmp_path / "a.db")
    assert a.latest_run().id == run and a.sessions(run) == []
    a.close()
    assert (tmp_path / "a.db").read_bytes() == before  # opened and read: not a byte changed
    a = Archive(tmp_path / "a.db")
    a.prepare_to_write()
    assert set(LLM_COLUMNS) <= set(a.db["llm_calls"].columns_dict) and a.db["sessions"].exists()
    assert ["run_id", "task", "code_hash"] in [i.columns for i in a.db["candidates"].indexes]
    a.close()


def test_sessions_are_kept_per_run_and_added_to_an_archive_made_before_them(tmp_path):
    run = make_old_archive(tmp_path / "a.db")
    a = Archive(tmp_path / "a.db")
    stats = {"started": 1.0, "wall_s": 60.0, "evaluations": 30, "workers": 2, "correctness_busy_s": 90.0,
             "timing_busy_s": 48.0, "status": "stopped", "aa_n": 2, "aa_median": 0.01, "aa_p90": 0.02,
             "gpus": 1, "units": "[]", "steady_evaluations": 20, "steady_s": 40.0}
    a.add_session(run, stats)
    a.add_sentinel(run, "softmax", 1.01, {"task": "softmax"})
    assert a.sentinel_speedups(run) == [1.01] and a.sentinel_speedups(run, since=2e9) == []
    a.add_session(run, {**stats, "evaluations": 10})
    got = a.sessions(run)
    assert [s["evaluations"] for s in got] == [30, 10] and {**got[0], "id": None, "run_id": None} == \
        {**stats, "id": None, "run_id": None}
    assert a.sessions(run + 1) == []
