"""Issue 40, paid answers never lost and no LLM call for a task that cannot be judged: an exchange
request is kept in the archive with the job it was made for, its answer is stored with it and
found for that job on any machine (whose prompt names another GPU), an answer no job takes is
adopted, each is used once; a task known invalid here gets no LLM call on resume, and the closing
table says why it stopped."""
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from archives.archive import Archive
from archives.records import Draft
from evolve.config import SearchConfig
from evolve.task_search import ADOPTED, Shared, TaskSearch
from operators.base import Pending
from operators.llm_client import LLMClient, LLMConfig, job_slot, request_hash
from operators.llm_exchange import Exchange, import_answers
from suites.registry import load_suite
from tests.conftest import CHEAP
from tests.llm_server import LLMServer, completion, kernel_variant, softmax_variant

ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, str(ROOT / "run.py")]
H100 = "NVIDIA H100 80GB HBM3"
CPU_NOTE = "No GPU was detected where the engine runs"
H100_NOTE = "NVIDIA H100 80GB HBM3 (compute capability 9.0): 132 SMs, memory bandwidth 3350 GB/s."


def _messages(gpu):
    return [{"role": "system", "content": "write kernels"}, {"role": "user", "content": f"Task `softmax`. {gpu}"}]


def _answer_line(custom_id, body, text):
    return json.dumps({"custom_id": custom_id, "response": {"status_code": 200, "body": completion(body, text)}})


def test_an_answer_is_found_for_its_job_on_another_machine_and_used_once(tmp_path):
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("builtin", {})
    ex = Exchange(tmp_path / "ex")
    meta = {"task": "softmax", "operator": "llm_mutate", "island": 0, "generation": 1, "parent_ids": [3]}
    there = LLMClient(LLMConfig("test-model"), archive, run, ex)
    with pytest.raises(Pending):
        there.complete(_messages(H100_NOTE), 0.7, meta, seed=11)
    ex.write_requests()
    (asked,) = [json.loads(x) for x in (ex.dir / "requests.jsonl").read_text().splitlines()]
    stored = archive.llm_request(asked["custom_id"])
    assert stored["slot"] == job_slot(meta, 11, 2) and json.loads(stored["body"]) == asked["body"]
    (ex.dir / "out.jsonl").write_text(_answer_line(asked["custom_id"], asked["body"], softmax_variant(1)) + "\n")
    (ex.dir / "requests.jsonl").unlink()  # the answer finds its request in the archive, not in this file
    here = LLMClient(LLMConfig("test-model"), archive, run, Exchange(tmp_path / "ex"))
    assert import_answers(here.exchange, here) == 1
    row = archive.db.execute("select messages, slot, parent_ids, task, used_for from llm_calls").fetchone()
    assert json.loads(row[0]) == _messages(H100_NOTE) and row[1:4] == (stored["slot"], "[3]", "softmax")
    assert row[4] is None and archive.unused_answer_count(run) == 1

    # this machine's prompt names no GPU: another request hash, the same job
    reply = here.complete(_messages(CPU_NOTE), 0.7, meta, seed=11)
    new_key = request_hash(here.body(_messages(CPU_NOTE), 0.7, 11))
    assert reply.cached and reply.text == softmax_variant(1) and new_key != asked["custom_id"]
    assert archive.db.execute("select used_for from llm_calls").fetchone()[0] == new_key
    assert archive.unused_answer_count(run) == 0
    assert here.complete(_messages(CPU_NOTE), 0.7, meta, seed=11).call_id == reply.call_id  # its resume: the same
    # the same job drawn again on a third machine gets its one answer again (the search finds its
    # child made already), and the answer stays the first user's
    assert here.complete(_messages("a third GPU"), 0.7, meta, seed=11).call_id == reply.call_id
    assert archive.db.execute("select used_for from llm_calls").fetchone()[0] == new_key
    assert archive.db.execute("select count(*) from llm_calls").fetchone()[0] == 1
    with pytest.raises(Pending):  # nor a job drawn about other parents (it is adopted instead)
        here.complete(_messages(CPU_NOTE), 0.7, {**meta, "parent_ids": [4]}, seed=11)
    with pytest.raises(Pending):  # another job (seed) never takes it
        here.complete(_messages(H100_NOTE + " "), 0.7, meta, seed=12)
    archive.close()


def test_answers_no_job_takes_are_adopted_as_children_of_the_parents_asked_about(tmp_path):
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("builtin", {})
    task = load_suite("builtin")["softmax"]
    start = archive.add_candidate(Draft(run, "softmax", -1, 0, task.start_source, "h0", (), "start"))
    for text in (softmax_variant(5), "no code here", softmax_variant(5)):  # the third: a duplicate of the first
        archive.add_llm_call({"run_id": run, "task": "softmax", "operator": "llm_crossover", "island": 0,
                              "generation": 1, "parent_ids": json.dumps([start.id, start.id]), "response": text,
                              "error": "", "request_hash": f"k{len(text)}{text[-5:]}", "source": "batch:x"})
    search = TaskSearch(task, [], SearchConfig(islands=1, population=2),
                        Shared(archive, run, submit=lambda t, s: None, stop=__import__("threading").Event()))
    (child,) = search._adopt(0, 1)
    assert child.operator == "llm_crossover" and child.parent_ids == (start.id, start.id)
    assert child.source.rstrip().endswith("_VARIANT = 5") and (child.island, child.generation) == (0, 1)
    rows = archive.db.execute("select used_for, candidate_id, parse_error from llm_calls order by id").fetchall()
    assert [r[0] for r in rows] == [ADOPTED] * 3 and rows[0][1] == child.id and rows[1][2]
    assert archive.unused_answers(run, "softmax", 0, 1) == [] and search._adopt(0, 1) == []
    archive.close()


def _cmd(tmp, *extra):
    return [*RUN, "--suite", "builtin", "--tasks", CHEAP, "--islands", "2", "--population", "3",
            "--workers", "2", "--device", "cpu", "--archive", str(tmp / "a.db"), "--export", str(tmp / "best"),
            *extra]


def _env(key=None):
    import os

    e = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    if key:
        e["OPENAI_API_KEY"] = key
    return e


def _as_if_asked_on_an_h100(tmp):
    """What round 1 would have left had it run on an H100: evaluations naming it, and requests whose
    prompts name it (so other hashes than this machine's), in the request file and the archive."""
    conn = sqlite3.connect(tmp / "a.db")
    conn.execute("update evaluations set device = ? where device != ''", [H100])
    lines = []
    for line in (tmp / "ex" / "requests.jsonl").read_text().splitlines():
        r = json.loads(line)
        text = json.dumps(r["body"])
        assert CPU_NOTE in text
        body = json.loads(text.replace(CPU_NOTE, "The GPU: " + H100_NOTE))
        key = request_hash(body)
        conn.execute("update llm_requests set request_hash = ?, body = ? where request_hash = ?",
                     [key, json.dumps(body), r["custom_id"]])
        lines.append(json.dumps({**r, "custom_id": key, "body": body}))
    conn.commit()
    conn.close()
    (tmp / "ex" / "requests.jsonl").write_text("\n".join(lines) + "\n")
    return [json.loads(x) for x in lines]


@pytest.mark.slow
def test_cli_exchange_round_answered_for_one_gpu_and_resumed_on_another(tmp_path):
    c = _cmd(tmp_path, "--model", "test-model", "--llm-exchange", str(tmp_path / "ex"), "--generations", "1")
    p = subprocess.run(c, capture_output=True, text=True, timeout=600, env=_env())
    assert p.returncode == 3 and "wrote 4 request(s)" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    round1 = _as_if_asked_on_an_h100(tmp_path)
    (tmp_path / "ex" / "output.jsonl").write_text(
        "".join(_answer_line(r["custom_id"], r["body"], kernel_variant(100 + i, CHEAP)) + "\n"
                for i, r in enumerate(round1)))
    old = (tmp_path / "a.db").read_bytes()
    p = subprocess.run(c, capture_output=True, text=True, timeout=600, env=_env())
    assert p.returncode == 2 and H100 in p.stderr and "--retime" in p.stderr, p.stderr[-2000:]
    assert (tmp_path / "a.db").read_bytes() == old

    p = subprocess.run([*c, "--retime"], capture_output=True, text=True, timeout=600, env=_env())
    assert p.returncode == 3, p.stdout[-2000:] + p.stderr[-3000:]
    assert "4 new answer(s) imported" in p.stdout and "not used yet" not in p.stdout, p.stdout
    conn = sqlite3.connect(f"file:{tmp_path / 'a.db'}?mode=ro", uri=True)
    answers = conn.execute("select request_hash, used_for, candidate_id from llm_calls where source like 'batch:%'"
                           ).fetchall()
    assert len(answers) == 4 and {a[0] for a in answers} == {r["custom_id"] for r in round1}
    # every answer used once, for the job it was asked for, though this machine's prompt differs
    assert all(a[1] and a[1] != a[0] for a in answers) and len({a[2] for a in answers} - {None}) == 4
    made = conn.execute("select count(*) from candidates where generation = 0 and source like '%_VARIANT = 10%'"
                        ).fetchone()[0]
    assert made == 4
    # nothing of generation 0 was asked again: the new round asks for generation 1 only
    asked = conn.execute("select generation, count(*) from llm_requests group by generation").fetchall()
    assert dict(asked)[0] == 4 and set(dict(asked)) == {0, 1}, asked
    round2 = [json.loads(x) for x in (tmp_path / "ex" / "requests.jsonl").read_text().splitlines()]
    assert round2 and len(round2) == dict(asked)[1]
    # no timing of the H100 beside this machine's: the start was evaluated again here
    assert conn.execute("select count(*) from evaluations where device = ?", [H100]).fetchone()[0] == 0
    assert conn.execute("select count(*) from retired_evaluations").fetchone()[0] >= 1


RAISING_TEST = """
import torch

def test_scale_add():
    raise RuntimeError("this reference fails here")

result_gold = test_scale_add()
"""


@pytest.mark.slow
def test_cli_no_llm_call_for_a_task_whose_reference_fails_here(tmp_path):
    """A TritonBench-layout task whose reference raises (a user task's reference that raises stops
    the CPU engine itself: fitness.common.reference.compute, reported to its owner), searched with the LLM
    operators against the local server, then resumed for another generation."""
    from tests.suite_fixtures import SCALE_ADD, perf_file, write_tritonbench

    data = write_tritonbench(tmp_path, {"broken_ref": (SCALE_ADD, RAISING_TEST, perf_file("broken_ref"))})
    args = [*RUN, "--suite", "tritonbench", "--suite-path", str(data), "--validation", str(tmp_path / "none.json"),
            "--islands", "2", "--population", "3", "--workers", "1", "--device", "cpu",
            "--archive", str(tmp_path / "a.db"), "--export", str(tmp_path / "best")]
    with LLMServer() as s:
        first = subprocess.run([*args, "--model", "test-model", "--base-url", s.url, "--generations", "1"],
                               capture_output=True, text=True, timeout=600, env=_env("k"))
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
        # a resume (another generation asked for) used to ask the LLM again, every child failing on the reference
        again = subprocess.run([*args, "--model", "test-model", "--base-url", s.url, "--generations", "2",
                                "--extend"], capture_output=True, text=True, timeout=600, env=_env("k"))
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
        assert s.requests == []
    for p in (first, again):
        row = next(line for line in p.stdout.splitlines() if line.startswith("broken_ref "))
        assert "stopped, invalid here" in row and "this reference fails here" in row, p.stdout
    conn = sqlite3.connect(f"file:{tmp_path / 'a.db'}?mode=ro", uri=True)
    assert conn.execute("select count(*) from evaluations").fetchone()[0] == 1  # the start's, once
    assert conn.execute("select count(*) from llm_calls").fetchone()[0] == 0
