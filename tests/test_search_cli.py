"""The main command end to end, with the real evaluator (Triton interpreter on CPU): a run
completes and exports kernels that pass `check`; a run killed with SIGKILL in the middle of a
generation resumes without evaluating anything twice; bad input is refused with the archive
left as it was."""
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from archives.archive import Archive
from evolve.config import RunConfig
from evolve.runner import _run_id
from tests.conftest import CHEAP

ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, str(ROOT / "run.py")]
TASK = CHEAP


def search_cmd(tmp, *extra):
    return [*RUN, "--suite", "builtin", "--tasks", TASK, "--islands", "2", "--population", "2",
            "--workers", "2", "--archive", str(tmp / "a.db"), "--export", str(tmp / "best"), *extra]


def db(tmp):
    return sqlite3.connect(f"file:{tmp / 'a.db'}?mode=ro", uri=True)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    p = subprocess.run(search_cmd(tmp, "--generations", "2"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return tmp, p


@pytest.mark.slow
def test_run_completes_archives_and_exports(finished):
    tmp, p = finished
    assert "operators: knobs" in p.stdout and "no LLM is configured" in p.stdout
    # the throughput line says which side bounded it: the workers ran the candidates
    busy = re.search(r"evaluations in \d+ s = [\d.]+/min(?: \(steady state[^)]*\))?; correctness workers busy (\d+)%",
                     p.stdout)
    assert busy and 0 < int(busy.group(1)) <= 100, p.stdout
    conn = db(tmp)
    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    gens = conn.execute("select island, max(generation) from populations group by island").fetchall()
    assert sorted(gens) == [(0, 2), (1, 2)]
    # generation 0: the start and one mutant an island; 1 and 2: two children an island
    assert conn.execute("select count(*) from evaluations").fetchone()[0] >= 1 + 2 * 1 + 2 * 2 * 2
    summary = json.loads((tmp / "best" / "summary.json").read_text())
    assert summary["tasks"][0]["status"] == "exported"
    assert (tmp / "best" / "summary.csv").read_text().startswith("task,status,speedup")
    exported = tmp / "best" / f"{TASK}.py"
    assert exported.read_text().startswith("# triton-evolve export")


@pytest.mark.slow
def test_exported_kernel_passes_check(finished):
    tmp, _ = finished
    p = subprocess.run([*RUN, "check", "--suite", "builtin", "--task", TASK, str(tmp / "best" / f"{TASK}.py")],
                       capture_output=True, text=True, timeout=300)
    verdict = json.loads(p.stdout)
    assert verdict["correct"] and verdict["heldout_correct"], verdict["reason"]


@pytest.mark.slow
def test_sigkill_mid_generation_then_resume(tmp_path):
    cmd = search_cmd(tmp_path, "--generations", "2", "--workers", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    # gen 0 is 1 start + 2 x 1 mutant; kill once generation 1 has some, not all, evaluations
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            n = db(tmp_path).execute("select count(*) from evaluations e join candidates c on c.id = e.candidate_id "
                                     "where c.generation = 1").fetchone()[0]
        except sqlite3.Error:
            n = 0
        if n >= 1:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    conn = db(tmp_path)
    saved = conn.execute("select max(generation) from populations").fetchone()[0]
    made_in_gen1 = conn.execute("select count(*) from candidates where generation = 1").fetchone()[0]
    evals_before = conn.execute("select id, candidate_id, created from evaluations order by id").fetchall()
    conn.close()
    assert saved == 0, "the kill should land inside generation 1"
    assert made_in_gen1 >= 1

    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "resuming run 1" in p.stdout
    conn = db(tmp_path)
    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    # what was evaluated before the kill is still there, unchanged, and was not evaluated again
    after = conn.execute("select id, candidate_id, created from evaluations order by id").fetchall()
    assert after[:len(evals_before)] == evals_before
    assert conn.execute("select count(*) from (select candidate_id from evaluations group by candidate_id "
                        "having count(*) > 1)").fetchone()[0] == 0
    assert conn.execute("select count(*) from (select code_hash from candidates group by run_id, task, code_hash "
                        "having count(*) > 1)").fetchone()[0] == 0
    # generations continued: 0..2 on both islands, in one run, with the children made before the kill kept
    assert conn.execute("select count(*) from runs").fetchone()[0] == 1
    assert conn.execute("select island, count(*) from populations group by island").fetchall() == [(0, 3), (1, 3)]
    assert conn.execute("select count(*) from candidates where generation = 1").fetchone()[0] >= made_in_gen1
    assert conn.execute("select count(*) from candidates c left join evaluations e on e.candidate_id = c.id "
                        "where e.id is null").fetchone()[0] == 0


@pytest.mark.parametrize("extra, message", [
    (["--islands", "0"], "--islands must be at least 1"),
    (["--patience", "0"], "--patience must be at least 1"),
    (["--roofline-stop", "1.5"], "--roofline-stop must be a share in (0, 1]"),
    (["--operators", "magic"], "unknown operator set 'magic'"),
    # --fresh: the same filters on a resume are refused as changes to the run (tests/test_config.py);
    # a new run checks them before it writes anything
    (["--fresh", "--tasks", "nope"], "unknown task(s): nope"),
    (["--fresh", "--category", "nothing"], "no task matches"),
])
@pytest.mark.slow
def test_bad_input_is_one_line_and_leaves_the_archive_alone(finished, extra, message):
    tmp, _ = finished
    before = (tmp / "a.db").read_bytes()
    cmd = [c for c in search_cmd(tmp) if c not in ("--tasks", TASK)] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert (tmp / "a.db").read_bytes() == before


def rows(tmp):
    conn = db(tmp)
    return [conn.execute(f"select * from {t} order by 1").fetchall() for t in ("runs", "candidates", "evaluations")]


@pytest.mark.slow
def test_conflicting_config_and_foreign_archive_are_refused(finished, tmp_path):
    tmp, _ = finished
    before = rows(tmp)
    p = subprocess.run([*search_cmd(tmp), "--seed", "5"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--seed 0" in p.stderr and "--fresh" in p.stderr, p.stderr
    p = subprocess.run([*search_cmd(tmp), "--baseline", "start"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--baseline reference" in p.stderr, p.stderr  # speedups would not compare
    assert rows(tmp) == before
    # an archive from an earlier version (no sessions table, the reserved llm_calls table with few
    # columns): a refused command and a report leave even its bytes as they were
    old = tmp_path / "old.db"
    shutil.copy(tmp / "a.db", old)
    conn = sqlite3.connect(old)
    conn.execute("drop table sessions")
    conn.execute("drop table llm_calls")
    conn.execute("create table llm_calls (id integer primary key, run_id integer, created float)")
    conn.commit()
    conn.close()
    old_bytes = old.read_bytes()
    cmd = [*search_cmd(tmp), "--seed", "5"]
    cmd[cmd.index("--archive") + 1] = str(old)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--seed 0" in p.stderr and old.read_bytes() == old_bytes, p.stderr
    p = subprocess.run([*RUN, "report", "--archive", str(old), "--out", str(tmp_path / "report")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "report of run 1" in p.stdout and old.read_bytes() == old_bytes, p.stderr
    # an accepted command brings it up to date before it writes
    archive = Archive(old)
    config = json.loads(db(tmp).execute("select config from runs").fetchone()[0])
    assert _run_id(archive, config, RunConfig(), lambda: frozenset({"cpu"})) == (1, "resuming run 1")
    assert "request_hash" in archive.db["llm_calls"].columns_dict and archive.db["sessions"].exists()
    archive.close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"\x00\x01 not sqlite")
    cmd = search_cmd(tmp)
    cmd[cmd.index("--archive") + 1] = str(junk)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "not an SQLite database" in p.stderr
    assert junk.read_bytes() == b"\x00\x01 not sqlite"


@pytest.mark.slow
def test_time_limit_and_sigterm_stop_cleanly_and_export(tmp_path):
    t0 = time.monotonic()
    p = subprocess.run(search_cmd(tmp_path, "--generations", "50", "--time-limit", "6"), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert time.monotonic() - t0 < 120
    assert json.loads((tmp_path / "best" / "summary.json").read_text())["tasks"][0]["status"] == "exported"
    assert db(tmp_path).execute("select status from runs").fetchone()[0] == "stopped"  # not "finished"
    # candidates still waiting for a worker at the stop give up: they stay pending for a resume
    assert (db(tmp_path).execute("select max(generation) from populations").fetchone()[0] or 0) < 50

    proc = subprocess.Popen(search_cmd(tmp_path, "--generations", "50"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    while "generation 0/50" not in proc.stderr.readline():
        assert proc.poll() is None
    n0 = db(tmp_path).execute("select count(*) from evaluations").fetchone()[0]
    proc.send_signal(signal.SIGTERM)  # as `timeout` sends it: handled like Ctrl-C
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "exported 1/1" in out
    assert db(tmp_path).execute("select status from runs").fetchone()[0] == "interrupted"
    assert db(tmp_path).execute("select count(*) from evaluations").fetchone()[0] >= n0


@pytest.mark.slow
def test_the_default_export_folder_is_named_after_the_archive(tmp_path):
    """Two archives of one suite never overwrite each other's exported kernels."""
    cmd = search_cmd(tmp_path, "--generations", "0", "--islands", "1")
    i = cmd.index("--export")
    del cmd[i:i + 2]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "a-best" / "summary.json").exists() and f"to {tmp_path / 'a-best'}" in p.stdout
