"""`run.py report`: a timed archive written through the Archive API with known figures, a real CPU
search (session fixture), a live run, and every kind of bad input."""
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from archives.archive import Archive
from archives.records import Draft, RunStatus
from archives.report import build
from fitness.engine.verdict import Verdict
from tests.conftest import CHEAP
from tests.timing_rows import timing_row

ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, str(ROOT / "run.py")]


def report(*args, timeout=120):
    return subprocess.run([*RUN, "report", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def times(candidate_ms, floor_ms):
    return [timing_row({"N": 1024}, "float32", candidate_ms, 1.0, floor_ms=floor_ms, bytes=1e9, flops=0)]


def add(a, run, task, island, gen, stage, correct=False, heldout=False, speedup=None, op="knob_mutation",
        rows=(), flags=()):
    cid = a.add_candidate(Draft(run, task, island, gen, f"# {task} {island} {gen} {op} {speedup}",
                                f"h{time.time_ns()}", (), op)).id
    a.add_evaluation(cid, Verdict(task, stage=stage, correct=correct, heldout_correct=heldout, speedup=speedup,
                                  times=list(rows), device="NVIDIA H100 80GB HBM3", flags=list(flags)))
    return cid


def llm_call(a, run, task, tokens_in, tokens_out):
    with a.db.conn:
        a.db["llm_calls"].insert({"run_id": run, "task": task, "operator": "llm_mutation", "model": "m",
                                  "prompt_tokens": tokens_in, "completion_tokens": tokens_out, "latency_s": 1.0,
                                  "error": "", "created": time.time()})


@pytest.fixture
def timed_archive(tmp_path):
    """Three counted tasks and one flagged invalid-here, two islands; the expected figures are
    worked out by hand in the tests."""
    a = Archive(tmp_path / "t.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 2, "population": 2, "generations": 2,
                                "operators": "knobs"})
    add(a, run, "softmax", -1, 0, "timed", True, True, 1.0, "start", times(1.0, 0.2))
    add(a, run, "row_sum", -1, 0, "timed", True, True, 1.0, "start", times(1.0, 0.1))
    add(a, run, "matmul", -1, 0, "call", op="start")
    add(a, run, "attention", -1, 0, "timed", True, True, 5.0, "start", times(1.0, 0.9), flags=["invalid-here"])
    llm_call(a, run, "softmax", 100, 50)
    add(a, run, "softmax", 0, 1, "timed", True, True, 2.0, rows=times(1.0, 0.5))
    add(a, run, "softmax", 1, 1, "compile")
    add(a, run, "row_sum", 0, 1, "timed", True, False, 3.0, rows=times(1.0, 0.9))  # fails held-out
    add(a, run, "matmul", 0, 1, "compile")
    llm_call(a, run, "row_sum", 200, 0)
    add(a, run, "row_sum", 1, 2, "timed", True, True, 1.2, rows=times(1.0, 0.25))
    add(a, run, "matmul", 1, 2, "call")
    for task in ("softmax", "row_sum", "matmul"):
        a.save_generation(run, task, 2, [[], []])
    a.set_status(run, RunStatus.FINISHED)
    a.close()
    return tmp_path / "t.db"


@pytest.mark.slow
def test_timed_report_figures_match_hand_computation(timed_archive, tmp_path):
    p = report("--archive", timed_archive, "--out", tmp_path / "rep", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    s = r["suite"]
    # counted: softmax best 2.0, row_sum best 1.2 (its 3.0 failed held-out), matmul none (1.0)
    assert s["tasks"] == 3 and s["solved"] == 2
    assert s["speedup"]["geomean"] == pytest.approx(2.4 ** (1 / 3))
    assert s["speedup"]["mean"] == pytest.approx(4.2 / 3) and s["speedup"]["median"] == pytest.approx(1.2)
    assert s["speedup_solved_only"]["geomean"] == pytest.approx(math.sqrt(2.4))
    assert s["fast_p"] == {"0.0": pytest.approx(2 / 3), "1.0": pytest.approx(2 / 3), "1.5": pytest.approx(1 / 3),
                           "2.0": 0.0}
    # islands correct: softmax 1 of 2, row_sum 2 of 2, matmul 0 of 2
    assert s["pass_at_k"] == {"1": pytest.approx(0.5), "2": pytest.approx(2 / 3), "5": None, "10": None}
    # generated: softmax 1 of 2 called/correct; row_sum 2/2, 2/2; matmul 1/2 called, 0 correct
    assert s["call_accuracy"] == pytest.approx((0.5 + 1 + 0.5) / 3)
    assert s["exec_accuracy"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert s["sol"]["geomean"] == pytest.approx(math.sqrt(0.5 * 0.25))
    assert s["heldout_generalization"] == pytest.approx(0.5) and s["heldout_generalization_n"] == 2
    assert r["invalid"] == [{"task": "attention", "reason": "an evaluation was flagged invalid-here"}]
    assert r["by_category"]["reduction"]["tasks"] == 2 and r["by_category"]["matmul"]["solved"] == 0
    assert set(r["by_difficulty"]) == {"1", "2", "3"} and "4" not in r["by_difficulty"]  # attention: invalid
    gens = r["scaling"]["by_generation"]
    assert [g["geomean_speedup"] for g in gens] == pytest.approx([1.0, 2 ** (1 / 3), 2.4 ** (1 / 3)])
    isl = r["scaling"]["by_islands"]
    assert [g["geomean_speedup"] for g in isl] == pytest.approx([2 ** (1 / 3), 2.4 ** (1 / 3)])
    assert r["llm"]["calls"] == 2 and r["llm"]["prompt_tokens"] == 300
    assert r["cost_curve"][-1] == {"tokens": 350, "geomean_speedup": pytest.approx(2.4 ** (1 / 3))}
    assert {"tokens": 150, "geomean_speedup": pytest.approx(2 ** (1 / 3))} in r["cost_curve"]
    out = tmp_path / "rep"
    assert sorted(f.name for f in (out / "plots").iterdir()) == [
        "llm_cost.png", "scaling_generations.png", "scaling_islands.png", "speedup_by_category.png"]
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 4
    assert "attention (invalid here: not counted)" in page and "1.339x" in page
    assert "1.339x" in (out / "summary.md").read_text()


def test_invalid_file_takes_tasks_out_of_the_figures(timed_archive, tmp_path):
    f = tmp_path / "invalid.json"
    # the shape `run.py validate --json` prints: verdicts, only those flagged invalid-here count
    f.write_text(json.dumps([{"task": "matmul", "flags": ["invalid-here"], "reason": "needs tensor cores"},
                             {"task": "softmax", "flags": []}]))
    r, _ = build(str(timed_archive), tmp_path / "rep", invalid_file=str(f))
    assert {i["task"] for i in r["invalid"]} == {"attention", "matmul"}
    assert r["suite"]["tasks"] == 2 and r["suite"]["speedup"]["geomean"] == pytest.approx(math.sqrt(2.4))
    f.write_text('["softmax"]')
    r, _ = build(str(timed_archive), tmp_path / "rep", invalid_file=str(f))
    assert r["suite"]["tasks"] == 2 and r["suite"]["solved"] == 1


@pytest.mark.slow
def test_report_never_writes_to_the_archive(timed_archive, tmp_path):
    before = timed_archive.read_bytes()
    timed_archive.chmod(0o444)
    try:
        assert report("--archive", timed_archive, "--out", tmp_path / "rep").returncode == 0
    finally:
        timed_archive.chmod(0o644)
    assert timed_archive.read_bytes() == before


def test_without_matplotlib_tables_render_and_plots_are_skipped(timed_archive, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    r, out = build(str(timed_archive), tmp_path / "rep")
    page = (out / "index.html").read_text()
    assert "plots skipped: matplotlib is not installed" in page and "<table>" in page
    assert r["plots"] == [] and not (out / "plots").exists()


# -- a real run on CPU ----------------------------------------------------------------------------
@pytest.mark.slow
def test_report_of_a_cpu_search(cpu_search_archive, builtin, tmp_path):
    out = tmp_path / "rep"
    p = report("--archive", cpu_search_archive, "--out", out)
    assert p.returncode == 0, p.stderr
    assert "report of run 1 (finished): 2 task(s)" in p.stdout and "No kernel was timed" in p.stdout
    r = json.loads((out / "report.json").read_text())
    conn = sqlite3.connect(f"file:{cpu_search_archive}?mode=ro", uri=True)
    for t in r["tasks"]:
        n, gen, ok, called = conn.execute(
            "select count(*), sum(c.operator != 'start'), sum(e.correct and c.operator != 'start'), "
            "sum(e.stage in ('call', 'correct', 'timed') and c.operator != 'start') "
            "from candidates c join evaluations e on e.candidate_id = c.id where c.task = ?", [t["task"]]).fetchone()
        assert (t["evaluated"], t["generated"]) == (n, gen)
        assert t["exec_accuracy"] == pytest.approx(ok / gen) and t["call_accuracy"] == pytest.approx(called / gen)
        islands_ok = conn.execute("select count(distinct c.island) from candidates c join evaluations e on "
                                  "e.candidate_id = c.id where c.task = ? and c.island >= 0 and e.correct",
                                  [t["task"]]).fetchone()[0]
        assert t["pass_at_k"]["1"] == pytest.approx(islands_ok / 2) and t["pass_at_k"]["5"] is None
        assert t["category"] == builtin[t["task"]].category and t["solved"]
    s = r["suite"]
    assert s["tasks"] == 2 and s["speedup"]["geomean"] is None and s["fast_p"]["1.0"] is None
    assert s["fast_p"]["0.0"] == 1.0 and s["sol"]["geomean"] is None
    assert [g["generation"] for g in r["scaling"]["by_generation"]] == [0, 1, 2]
    assert [g["islands"] for g in r["scaling"]["by_islands"]] == [1, 2]
    page = (out / "index.html").read_text()
    assert "<h2>Suite (setting optimize)</h2>" in page and "Accuracy by setting" in page
    assert "<h2>By category</h2>" in page and all(t["task"] in page for t in r["tasks"])
    assert page.count("data:image/png;base64,") == 2  # scaling; nothing timed, no LLM calls: no other plot
    assert "not drawn: the speedup distribution per category (no kernel was timed); LLM cost" in page
    md = (out / "summary.md").read_text()
    assert "| pass@1 | 100.0% |" in md or "| pass@1 | 50.0% |" in md
    # the command's throughput, as the run printed it and the sessions table keeps it
    (session,) = r["sessions"]
    n_evals = conn.execute("select count(*) from evaluations").fetchone()[0]
    assert session["evaluations"] == n_evals and session["timing_busy"] is None and session["status"] == "finished"
    assert 0 < session["correctness_busy"] <= 1 and session["per_min"] == pytest.approx(
        60 * n_evals / session["wall_s"])
    steady = "-" if session["steady_per_min"] is None else f"{session['steady_per_min']:.1f}"
    assert "## Sessions (throughput)" in md and f"| {session['per_min']:.1f} | {steady} | n/a |" in md
    assert "![Sequential scaling" in md and (out / "plots" / "scaling_generations.png").stat().st_size > 5000


# -- live archives ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_report_while_a_writer_holds_an_open_transaction(tmp_path):
    a = Archive(tmp_path / "live.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 1})
    add(a, run, "softmax", -1, 0, "correct", True, True, None, "start")
    a.db.conn.execute("begin immediate")  # the writer is mid-transaction: its rows are not committed
    a.db.conn.execute("insert into candidates (run_id, task, island, generation, source, code_hash, operator) "
                      "values (?, 'softmax', 0, 1, 'x', 'y', 'knob_mutation')", [run])
    try:
        t0 = time.monotonic()
        p = report("--archive", tmp_path / "live.db", "--out", tmp_path / "rep", "--json")
        assert time.monotonic() - t0 < 60
    finally:
        a.db.conn.rollback()
        a.close()
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["live"] and r["tasks"][0]["evaluated"] == 1 and r["tasks"][0]["pending"] == 0
    assert "still running" in (tmp_path / "rep" / "index.html").read_text()


@pytest.mark.slow
def test_report_of_a_search_that_is_running(tmp_path):
    db = tmp_path / "run.db"
    proc = subprocess.Popen([*RUN, "--suite", "builtin", "--tasks", CHEAP, "--islands", "1", "--population", "2",
                             "--generations", "50", "--archive", str(db), "--export", str(tmp_path / "best")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if db.exists() and report("--archive", db, "--out", tmp_path / "rep").returncode == 0:
                r = json.loads((tmp_path / "rep" / "report.json").read_text())
                if r["tasks"] and r["tasks"][0]["evaluated"] >= 2:
                    break
            time.sleep(1)
        assert proc.poll() is None, "the search should still be running"
        p = report("--archive", db, "--out", tmp_path / "rep")
        assert p.returncode == 0 and "(running)" in p.stdout and "still running" in p.stdout, p.stdout + p.stderr
    finally:
        proc.kill()
        proc.wait(timeout=60)


# -- bad input -------------------------------------------------------------------------------------
def _old_schema(path):
    a = Archive(path)
    a.close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("update meta set value = '0' where key = 'schema_version'")
    conn.close()


def _other_tool(path):
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("create table notes (x)")
    conn.close()


@pytest.mark.parametrize("make, message", [
    (None, "no archive at"),
    (lambda p: p.write_bytes(b"hello, not a database"), "is not an SQLite database"),
    (lambda p: p.write_bytes(b""), "is an empty file"),
    (lambda p: Archive(p).close(), "holds no run yet (an empty archive)"),
    (_old_schema, "schema version 0, an older one than this triton-evolve reads (1)"),
    (_other_tool, "is not a triton-evolve archive"),
    (lambda p: p.mkdir(), "is not a file"),
    (lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200), "not a readable SQLite database"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, message):
    path = tmp_path / "a.db"
    if make:
        make(path)
    p = report("--archive", path, "--out", tmp_path / "rep")
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_unknown_run_and_unreadable_invalid_file(timed_archive, tmp_path):
    p = report("--archive", timed_archive, "--run", 7, "--out", tmp_path / "rep")
    assert p.returncode == 2 and "has no run 7 (runs: 1)" in p.stderr
    p = report("--archive", timed_archive, "--invalid", tmp_path / "nope.json", "--out", tmp_path / "rep")
    assert p.returncode == 2 and "no file of invalid tasks" in p.stderr


@pytest.mark.slow
def test_run_with_candidates_but_no_evaluation_yet(tmp_path):
    a = Archive(tmp_path / "a.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 2})
    a.add_candidate(Draft(run, "softmax", -1, 0, "src", "h", (), "start"))
    a.close()
    p = report("--archive", tmp_path / "a.db", "--out", tmp_path / "rep")
    assert p.returncode == 0, p.stderr
    assert "No evaluation has been recorded yet" in p.stdout
    assert "1 pending" in (tmp_path / "rep" / "index.html").read_text()


@pytest.mark.skipif(not shutil.which("chromium"), reason="headless Chromium not installed (apt-get install chromium)")
def test_page_renders_in_headless_chromium(timed_archive, tmp_path):
    _, out = build(str(timed_archive), tmp_path / "rep")
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,3000", f"--screenshot={shot}", (out / "index.html").resolve().as_uri()],
                   capture_output=True, timeout=120)
    import matplotlib.image
    import numpy as np

    img = (matplotlib.image.imread(shot)[:, :, :3] * 255).astype(int)
    assert img.shape[:2] == (3000, 1200)
    # the embedded plots were decoded and drawn: their line colours (matplotlib's blue, green, red)
    # are on the page; text and tables are grey, so a page with broken or missing images has none
    for colour in ((31, 119, 180), (44, 160, 44), (214, 39, 40)):
        assert (np.abs(img - np.array(colour)).max(axis=2) <= 12).sum() > 200, colour


def test_suite_not_loadable_here_still_reports(tmp_path):
    a = Archive(tmp_path / "a.db")
    run = a.new_run("tritonbench", {"suite": "tritonbench", "islands": 1, "suite_path": "/nowhere"})
    add(a, run, "some_task", -1, 0, "timed", True, True, 1.5, "start", times(1.0, 0.5))
    a.close()
    r, out = build(str(tmp_path / "a.db"), tmp_path / "rep")
    assert r["tasks"][0]["category"] == "unknown" and r["suite"]["speedup"]["geomean"] == pytest.approx(1.5)
    assert "Categories and difficulties unknown: suite 'tritonbench' not loadable here" in \
        (out / "summary.md").read_text()


@pytest.mark.slow
def test_time_breakdown_of_a_search_and_of_one_session(cpu_search_archive):
    """bench/time_breakdown.py reads the phases the verdicts recorded."""
    script = [sys.executable, str(Path(__file__).resolve().parent.parent / "bench" / "time_breakdown.py"),
              "--archive", str(cpu_search_archive)]
    whole = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0, whole.stderr
    n = sqlite3.connect(f"file:{cpu_search_archive}?mode=ro", uri=True).execute(
        "select count(*) from evaluations").fetchone()[0]
    assert whole.stdout.startswith(f"{n} evaluations of run 1") and "\n(all)\n" in whole.stdout
    assert "worker.first_case" in whole.stdout and "reference_compare_s" in whole.stdout
    one = subprocess.run([*script, "--session", "1"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and one.stdout.startswith(f"{n} evaluations of run 1 in") and "session 1" in one.stdout
    missing = subprocess.run([*script, "--session", "9"], capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "has no session 9" in missing.stderr


def test_each_units_throughput_is_its_evaluations_over_the_sessions_wall_time():
    import json

    from archives.analysis import unit_rates

    units = [{"unit": "n1:gpu0:1", "device": "NVIDIA H100", "gpu": True, "workers": 8, "evaluations": 60,
              "correctness_busy_s": 240.0, "measuring_s": 54.0},
             {"unit": "n1:gpu1:2", "device": "NVIDIA H100", "gpu": True, "workers": 8, "evaluations": 30,
              "correctness_busy_s": 120.0, "measuring_s": 27.0}]
    rows = unit_rates({"wall_s": 60.0, "units": json.dumps(units)})
    assert [(r["unit"], r["per_min"]) for r in rows] == [("n1:gpu0:1", 60.0), ("n1:gpu1:2", 30.0)]
    assert rows[0]["timing_busy"] == 0.9 and rows[0]["correctness_busy"] == 0.5
    assert unit_rates({"wall_s": 60.0, "units": None}) == [] and unit_rates({"wall_s": 1.0, "units": "{bad"}) == []


# -- the kernel sections -----------------------------------------------------------------------------
START_SRC = "import triton\n\n\ndef softmax(x):\n    return x.softmax(-1)  # BLOCK = 128\n"
MID_SRC = START_SRC.replace("128", "256")
BEST_SRC = MID_SRC.replace("    return", "    y = x.float()  # ```not a fence end```\n    return")


@pytest.fixture
def lineage_archive(tmp_path):
    """softmax: start -> knob mutation -> crossover of it and the start (the best kernel, flagged);
    a faster kernel that fails the held-out shapes; a crash. row_sum: nothing correct."""
    a = Archive(tmp_path / "k.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 2, "population": 2, "generations": 2})

    def put(src, parents, op, gen, island, note="", **verdict):
        cid = a.add_candidate(Draft(run, "softmax", island, gen, src, f"h{time.time_ns()}", parents, op, note)).id
        a.add_evaluation(cid, Verdict("softmax", device="NVIDIA H100 80GB HBM3", **verdict))
        return cid

    ok = {"stage": "timed", "correct": True, "heldout_correct": True}
    s0 = put(START_SRC, (), "start", 0, -1, "the task's starting kernel", speedup=1.0, **ok)
    s1 = put(MID_SRC, (s0,), "knob_mutation", 1, 0, "BLOCK 128 -> 256", speedup=1.4, **ok)
    rows = [timing_row({"M": 4096, "N": 1024}, "float16", 0.25, 0.5, candidate_spread=0.031, floor_ms=0.1),
            timing_row({"M": 64, "N": 8192}, "float32", 0.1, 0.2, candidate_spread=0.004, floor_ms=0.05)]
    s2 = put(BEST_SRC, (s1, s0), "llm_crossover", 2, 1, "fused the <script>alert(1)</script> | loads",
             speedup=2.0, times=rows, flags=["noisy-timing", "<b>odd</b>"], **ok)
    fast = put(BEST_SRC + "# faster\n", (s2,), "llm_mutate", 2, 0, speedup=3.0, stage="timed", correct=True)
    crash = put("def softmax(x): raise RuntimeError", (s0,), "llm_mutate", 1, 1, stage="compile",
                reason="RuntimeError")
    cid = a.add_candidate(Draft(run, "row_sum", -1, 0, "def row_sum(x): pass", "r0", (), "start")).id
    a.add_evaluation(cid, Verdict("row_sum", stage="call", reason="wrong result on tuning shape"))
    a.set_status(run, RunStatus.FINISHED)
    a.close()
    return tmp_path / "k.db", {"start": s0, "mid": s1, "best": s2, "fast": fast, "crash": crash}


def test_kernel_section_shows_source_diff_lineage_times_and_flags(lineage_archive, tmp_path):
    path, ids = lineage_archive
    r, out = build(str(path), tmp_path / "rep")
    k = {s["task"]: s for s in r["kernels"]}
    # the export's choice: the 3.0x kernel failed the held-out shapes
    assert k["softmax"]["best"]["id"] == ids["best"] and k["softmax"]["best"]["source"] == BEST_SRC
    assert [x["id"] for x in k["softmax"]["lineage"]] == [ids["start"], ids["mid"], ids["best"]]
    assert [x["operator"] for x in k["softmax"]["lineage"]] == ["start", "knob_mutation", "llm_crossover"]
    assert k["softmax"]["lineage"][2]["other_parents"] == [ids["start"]] and k["softmax"]["broken_at"] is None
    assert k["softmax"]["flags"] == ["noisy-timing", "<b>odd</b>"]
    assert [t["speedup"] for t in k["softmax"]["times"]] == [2.0, 2.0]
    assert k["row_sum"]["best"] is None and k["row_sum"]["lineage"] == []
    md = (out / "summary.md").read_text()
    section = md[md.index("## Best kernels"):md.index("## Plots")]
    assert f"### softmax: #{ids['best']} llm_crossover, speedup 2.000x, 2 step(s) from the starting kernel" in section
    rows = [f"| 0 | #{ids['start']} | start | 0 | all | timed | 1.000x |",
            f"| 1 | #{ids['mid']} | knob_mutation | 1 | 0 | timed | 1.400x | BLOCK 128 -&gt; 256 |",
            f"| 2 | #{ids['best']} (+ parents #{ids['start']}) | llm_crossover | 2 | 1 | timed | 2.000x |"]
    assert all(row in section for row in rows) and [section.index(x) for x in rows] == sorted(
        section.index(x) for x in rows)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| loads" in section  # escaped: one cell, no raw HTML
    assert "| M=4096, N=1024 | float16 | 0.2500 | 0.5000 | 2.000x | 3.1% |" in section
    assert "`noisy-timing: a shape's trials spread more than 10%" in section and "`<b>odd</b>`" in section
    diff = section[section.index("````diff"):]
    assert f"--- start #{ids['start']}\n+++ best #{ids['best']}\n" in diff
    assert "-    return x.softmax(-1)  # BLOCK = 128\n" in diff and "+    y = x.float()  # ```not a fence" in diff
    assert "````python\n" + BEST_SRC + "````" in section  # the source's ``` does not close the fence
    assert "### row_sum: no kernel correct on the tuning and held-out shapes" in section
    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and "<b>odd</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;odd&lt;/b&gt;" in page
    assert "<span class='del'>-    return x.softmax(-1)  # BLOCK = 128</span>" in page
    assert "<span class='add'>+    y = x.float()  # ```not a fence end```</span>" in page
    assert page.count("<details class='kernel'>") == 2 and "http-equiv='refresh'" not in page


def test_lineage_stops_where_a_parent_is_not_in_the_run():
    from archives.kernels import lineage
    from archives.records import Candidate

    def cand(cid, parents, op="knob_mutation"):
        return Candidate(cid, 1, "t", 0, 1, "src", "h", parents, op, "")

    chain, broken = lineage(cand(9, (7,)), {7: cand(7, (5,)), 9: cand(9, (7,))})
    assert [s.id for s in chain] == [7, 9] and broken == 5
    loop = {1: cand(1, (2,)), 2: cand(2, (1,))}  # never written, but the walk must end
    chain, broken = lineage(loop[1], loop)
    assert [s.id for s in chain] == [2, 1] and broken == 1


@pytest.mark.slow
def test_kernel_sections_of_a_cpu_search_match_the_export(cpu_search_archive, tmp_path):
    r, out = build(str(cpu_search_archive), tmp_path / "rep")
    exported = json.loads((cpu_search_archive.parent / "best" / "summary.json").read_text())
    conn = sqlite3.connect(f"file:{cpu_search_archive}?mode=ro", uri=True)
    for k, e in zip(r["kernels"], sorted(exported["tasks"], key=lambda t: t["task"])):
        assert k["task"] == e["task"] and k["best"]["id"] == e["candidate"]
        assert Path(e["file"]).read_text().endswith(k["best"]["source"])
        steps = k["lineage"]
        assert steps[0]["operator"] == "start" and steps[-1]["id"] == k["best"]["id"]
        for parent, child in zip(steps, steps[1:]):
            parents = json.loads(conn.execute("select parent_ids from candidates where id = ?",
                                              [child["id"]]).fetchone()[0])
            assert parents[0] == parent["id"]
        assert "untimed-no-gpu" in k["flags"] and k["times"] == []
    assert "No per-shape times: the kernel was not timed." in (out / "summary.md").read_text()


# -- --watch ----------------------------------------------------------------------------------------------
def _wait_for(check, proc, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def _evaluated(out):
    try:
        return json.loads((out / "report.json").read_text())["tasks"][0]["evaluated"]
    except (OSError, ValueError, IndexError):
        return None


@pytest.mark.slow
def test_watch_rewrites_while_live_and_stops_with_the_run(tmp_path):
    a = Archive(tmp_path / "live.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 1})
    add(a, run, "softmax", -1, 0, "correct", True, True, None, "start")
    out = tmp_path / "rep"
    proc = subprocess.Popen([*RUN, "report", "--archive", str(tmp_path / "live.db"), "--out", str(out),
                             "--watch", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _evaluated(out) == 1, proc)
        assert "http-equiv='refresh' content='1'" in (out / "index.html").read_text()
        add(a, run, "softmax", 0, 1, "compile")
        _wait_for(lambda: _evaluated(out) == 2, proc)
        a.set_status(run, RunStatus.FINISHED)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        proc.kill()
        a.close()
    assert proc.returncode == 0, stderr
    assert stdout.strip().splitlines()[-1] == f"run 1 is finished: stopped watching; the report is at {out}/index.html"
    assert _evaluated(out) == 2 and "http-equiv" not in (out / "index.html").read_text()
    assert "(running)" in stdout and "(finished)" in stdout


@pytest.mark.slow
def test_watch_stops_cleanly_on_ctrl_c(tmp_path):
    import signal

    a = Archive(tmp_path / "live.db")
    run = a.new_run("builtin", {"suite": "builtin", "islands": 1})
    add(a, run, "softmax", -1, 0, "correct", True, True, None, "start")
    a.close()
    out = tmp_path / "rep"
    proc = subprocess.Popen([*RUN, "report", "--archive", str(tmp_path / "live.db"), "--out", str(out),
                             "--watch", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a shell's background job inherits SIGINT ignored, and Python then leaves it
                            # ignored (CI run as `... &`: the watch never stopped)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(lambda: _evaluated(out) == 1, proc)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert stdout.strip().splitlines()[-1] == f"stopped watching (Ctrl-C); the report is at {out}/index.html"


@pytest.mark.parametrize("args, message", [
    (["--watch", "0"], "--watch takes seconds above 0 and at most 86400, not 0"),
    (["--watch", "nan"], "--watch takes seconds above 0"),
    (["--watch", "5", "--json"], "--watch and --json do not go together"),
])
def test_watch_bad_values_are_one_line_and_exit_2(timed_archive, tmp_path, args, message):
    p = report("--archive", timed_archive, "--out", tmp_path / "rep", *args)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_watch_of_a_missing_archive_is_one_line_and_exit_2(tmp_path):
    p = report("--archive", tmp_path / "none.db", "--out", tmp_path / "rep", "--watch", "1")
    assert p.returncode == 2 and p.stderr.strip() == f"error: no archive at {tmp_path}/none.db"
