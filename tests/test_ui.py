"""`run.py ui`: the archive in a real Datasette (in-process test client, and the served command),
its metadata against the schema a real Archive creates, and the canned queries' results against
the report's own computations."""
import asyncio
import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from archives import metrics, ui
from archives.archive import Archive
from archives.kernels import lineage
from archives.records import Draft, RunStatus
from archives.report_data import load
from fitness.engine.verdict import Verdict

datasette_app = pytest.importorskip("datasette.app", reason="the ui extra (datasette) is not installed")
ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, str(ROOT / "run.py")]


def query(path, url, live=False):
    """GET `url` from a real Datasette over the archive; (status, JSON or text)."""
    async def get():
        files = {"files": [str(path)]} if live else {"immutables": [str(path)]}
        ds = datasette_app.Datasette(metadata=ui.metadata(Path(path).stem), **files)
        await ds.invoke_startup()
        r = await ds.client.get(url)
        ds.databases[Path(path).stem].close()
        return r.status_code, (r.json() if ".json" in url else r.text)
    return asyncio.run(get())


def put(a, run, task, src, parents=(), op="knob_mutation", gen=1, island=0, **verdict):
    cid = a.add_candidate(Draft(run, task, island, gen, src, f"h{time.time_ns()}", tuple(parents), op, "n")).id
    a.add_evaluation(cid, Verdict(task, **verdict))
    return cid


OK = {"stage": "timed", "correct": True, "heldout_correct": True}


@pytest.fixture
def archive(tmp_path):
    """Two runs. Run 1: softmax (a three-step lineage; a faster kernel failing held-out; a tie the
    older kernel wins), row_sum (untimed correct kernels: the oldest wins), matmul (none correct),
    and one failure of each coarse class. Run 2: one task, so best kernels are per run."""
    a = Archive(tmp_path / "arch.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 2})
    s0 = put(a, run, "softmax", "start", op="start", gen=0, island=-1, speedup=1.0, **OK)
    s1 = put(a, run, "softmax", "s1", [s0], speedup=1.5, **OK)
    s2 = put(a, run, "softmax", "s2", [s1, s0], op="llm_crossover", gen=2, speedup=2.0, **OK)
    put(a, run, "softmax", "s3", [s2], gen=3, speedup=2.0, **OK)  # ties with s2, younger: loses
    put(a, run, "softmax", "fast", [s2], gen=3, speedup=5.0, stage="timed", correct=True, reason="held-out")
    r0 = put(a, run, "row_sum", "r0", op="start", gen=0, island=-1, **{**OK, "stage": "correct"})
    put(a, run, "row_sum", "r1", [r0], **{**OK, "stage": "correct"})
    fails = [("static gate: imports os", "none", []), ("import failed: SyntaxError", "parse", []),
             ("RuntimeError: boom", "compile", []), ("wrong result on tuning shape", "call", []),
             ("timed out after 40 s (hang or infinite loop); worker killed", "compile", []),
             ("CUDA out of memory", "compile", []), ("timing: it crashed", "correct", ["timing-failed"]),
             ("replay: torch did work outside Triton kernels", "correct", []),
             ("wrong result on held-out shape", "correct", [])]
    for i, (why, stage, flags) in enumerate(fails):
        put(a, run, "matmul", f"m{i}", op="llm_mutate", stage=stage, reason=why, flags=flags,
            correct=stage == "correct" and why.startswith("wrong"))
    run2 = a.new_run("builtin", {"suite": "builtin", "islands": 1})
    put(a, run2, "softmax", "other run", op="start", gen=0, island=-1, speedup=1.1, **OK)
    a.set_status(run, RunStatus.FINISHED)
    a.set_status(run2, RunStatus.FINISHED)
    a.close()
    return tmp_path / "arch.db", {"s0": s0, "s1": s1, "s2": s2, "r0": r0}


def test_metadata_describes_every_table_and_column_a_real_archive_has(tmp_path):
    Archive(tmp_path / "fresh.db").close()
    conn = sqlite3.connect(tmp_path / "fresh.db")
    real = {t: [r[1] for r in conn.execute(f"pragma table_info({t})")]
            for (t,) in conn.execute("select name from sqlite_master where type = 'table'")}
    meta = ui.metadata("fresh")["databases"]["fresh"]["tables"]
    assert set(meta) == set(real)
    for table, columns in real.items():
        assert sorted(meta[table]["columns"]) == sorted(columns), table
        assert all(d.strip() for d in meta[table]["columns"].values())
    json.dumps(ui.metadata("fresh"))  # what --metadata-out writes


def test_table_pages_show_the_descriptions(archive):
    path, _ = archive
    status, page = query(path, "/arch/evaluations")
    assert status == 200 and "What the evaluator found of each candidate" in page
    assert "baseline time / kernel time, geometric mean over the timed tuning shapes" in page


def test_best_kernels_query_is_the_exports_choice(archive):
    path, ids = archive
    status, rows = query(path, "/arch/best_kernels.json?_shape=array")
    assert status == 200, rows
    got = {(r["run_id"], r["task"]): r["candidate_id"] for r in rows}
    expected = {}
    for run_id in (1, 2):
        data = load(path, run_id, load_tasks=False)
        for task, cands in data.rows.items():
            best = metrics.best_kernel(cands, need_heldout=True)
            if best:
                expected[(run_id, task)] = best.id
    assert got == expected
    assert got[(1, "softmax")] == ids["s2"] and got[(1, "row_sum")] == ids["r0"] and (1, "matmul") not in got


def test_lineage_query_walks_first_parents_back_to_the_start(archive):
    path, ids = archive
    status, rows = query(path, f"/arch/lineage.json?_shape=array&candidate_id={ids['s2']}")
    assert status == 200, rows
    assert [r["candidate_id"] for r in rows] == [ids["s0"], ids["s1"], ids["s2"]]
    assert [r["operator"] for r in rows] == ["start", "knob_mutation", "llm_crossover"]
    assert [r["speedup"] for r in rows] == [1.0, 1.5, 2.0] and rows[-1]["parent_ids"] == f"[{ids['s1']}, {ids['s0']}]"
    cands = {c.id: c for c in load(path, 1, load_tasks=False).rows["softmax"]}
    chain, _ = lineage(cands[ids["s2"]], cands)
    assert [s.id for s in chain] == [r["candidate_id"] for r in rows]  # the report's walk, the same
    _, rows = query(path, f"/arch/lineage.json?_shape=array&candidate_id={ids['s0']}")
    assert [r["candidate_id"] for r in rows] == [ids["s0"]]


def test_failures_by_reason_classes(archive):
    path, _ = archive
    status, rows = query(path, "/arch/failures_by_reason.json?_shape=array")
    assert status == 200, rows
    counts = {r["class"]: r["evaluations"] for r in rows}
    assert counts == {"static gate": 1, "import or compile error": 1, "crash when run": 1,
                      "wrong result (tuning shapes)": 1, "timeout (hang)": 1, "out of memory": 1, "timing failed": 1,
                      "replay check": 1, "wrong result (held-out shapes)": 2}  # softmax's 5x kernel and m8
    held = next(r for r in rows if r["class"] == "wrong result (held-out shapes)")
    assert held["tasks"] == 2 and set(held["task_names"].split(",")) == {"softmax", "matmul"}


def test_a_live_archive_is_read_as_it_grows(tmp_path):
    a = Archive(tmp_path / "live.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 1})
    s0 = put(a, run, "softmax", "start", op="start", gen=0, island=-1, speedup=1.0, **OK)
    assert ui.live(tmp_path / "live.db")
    cmd = ui.datasette_args(tmp_path / "live.db", tmp_path / "m.json", "127.0.0.1", 8001, True)
    assert "-i" not in cmd  # immutable would ignore the WAL the writer is filling

    async def twice():
        ds = datasette_app.Datasette(files=[str(tmp_path / "live.db")], metadata=ui.metadata("live"))
        await ds.invoke_startup()
        first = (await ds.client.get("/live/best_kernels.json?_shape=array")).json()
        put(a, run, "softmax", "s1", [s0], speedup=3.0, **OK)  # the writer commits meanwhile
        second = (await ds.client.get("/live/best_kernels.json?_shape=array")).json()
        ds.databases["live"].close()  # the last reader gone, the writer's close checkpoints the WAL away
        return first, second
    first, second = asyncio.run(twice())
    a.set_status(run, RunStatus.FINISHED)
    a.close()
    assert [r["speedup"] for r in first] == [1.0] and [r["speedup"] for r in second] == [3.0]
    assert not ui.live(tmp_path / "live.db")  # finished and checkpointed: served immutable


@pytest.mark.slow
def test_canned_queries_on_a_real_cpu_search(cpu_search_archive, tmp_path):
    from archives.report import build

    r, _ = build(str(cpu_search_archive), tmp_path / "rep", load_tasks=False)
    _, rows = query(cpu_search_archive, f"/{cpu_search_archive.stem}/best_kernels.json?_shape=array")
    assert {x["task"]: x["candidate_id"] for x in rows} == {k["task"]: k["best"]["id"] for k in r["kernels"]}
    for k in r["kernels"]:
        _, steps = query(cpu_search_archive,
                         f"/{cpu_search_archive.stem}/lineage.json?_shape=array&candidate_id={k['best']['id']}")
        assert [s["candidate_id"] for s in steps] == [s["id"] for s in k["lineage"]]
    _, fails = query(cpu_search_archive, f"/{cpu_search_archive.stem}/failures_by_reason.json?_shape=array")
    n = sqlite3.connect(f"file:{cpu_search_archive}?mode=ro", uri=True).execute(
        "select count(*) from evaluations where not passed").fetchone()[0]
    assert sum(f["evaluations"] for f in fails) == n


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ui_command_serves_the_archive_until_ctrl_c(archive):
    path, ids = archive
    port = _free_port()
    proc = subprocess.Popen([*RUN, "ui", "--archive", str(path), "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # a shell's background job inherits SIGINT ignored, and Python then leaves it ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline, rows = time.monotonic() + 90, None
        while rows is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/arch/best_kernels.json?_shape=array") as f:
                    rows = json.loads(f.read())
            except OSError:
                time.sleep(0.5)
        assert rows and {r["candidate_id"] for r in rows} >= {ids["s2"], ids["r0"]}
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert stdout.startswith(f"serving {path} (finished: immutable) at http://127.0.0.1:{port}/arch")


@pytest.mark.slow
def test_metadata_out_and_bad_input(archive, tmp_path):
    path, _ = archive
    p = subprocess.run([*RUN, "ui", "--archive", str(path), "--metadata-out", str(tmp_path / "m.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"datasette serve -i {path} --metadata {tmp_path}/m.json")
    assert json.loads((tmp_path / "m.json").read_text()) == ui.metadata("arch")
    (tmp_path / "junk.db").write_bytes(b"not sqlite")
    for bad, message in ((tmp_path / "none.db", "no archive at"), (tmp_path / "junk.db", "is not an SQLite database")):
        p = subprocess.run([*RUN, "ui", "--archive", str(bad)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
