"""`run.py` with LLM operators end to end: the real evaluator (Triton interpreter on CPU), the real
openai client in the run's process, a local chat-completions server in the test's. A run, a
SIGKILL and a resume that buys no stored answer again, the --llm-exchange round trip (with
`llm-batch` for the second round), and bad input."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operators.llm_client import request_hash
from tests.conftest import CHEAP
from tests.llm_server import LLMServer, completion, kernel_variant

ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, str(ROOT / "run.py")]


def env(key="k"):
    e = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    if key:
        e["OPENAI_API_KEY"] = key
    return e


def cmd(tmp, *extra):
    return [*RUN, "--suite", "builtin", "--tasks", CHEAP, "--islands", "2", "--population", "3",
            "--workers", "2", "--archive", str(tmp / "a.db"), "--export", str(tmp / "best"), *extra]


def db(tmp):
    return sqlite3.connect(f"file:{tmp / 'a.db'}?mode=ro", uri=True)


@pytest.mark.slow
def test_llm_run_records_calls_tokens_and_cost(tmp_path):
    with LLMServer(usage={"prompt_tokens": 2000, "completion_tokens": 400}, task=CHEAP) as s:
        p = subprocess.run(cmd(tmp_path, "--model", "test-model", "--base-url", s.url, "--generations", "1",
                               "--llm-price", "1.5,6"), capture_output=True, text=True, timeout=600, env=env())
        assert p.returncode == 0, p.stderr[-3000:]
        n_requests = len(s.requests)
    assert "operators: llm (test-model" in p.stdout and "the default when a model is configured" in p.stdout
    conn = db(tmp_path)
    rows = conn.execute("select prompt_tokens, completion_tokens, cost_usd, candidate_id, response from llm_calls "
                        "where error = ''").fetchall()
    assert len(rows) == n_requests >= 4
    assert all(r[:3] == (2000, 400, pytest.approx(2000 * 1.5e-6 + 400 * 6e-6)) for r in rows)
    made = conn.execute("select count(*) from candidates c join evaluations e on e.candidate_id = c.id "
                        "where c.operator like 'llm_%' and e.correct = 1").fetchone()[0]
    assert made >= 4 and all(r[3] is not None for r in rows)
    assert f"LLM: {n_requests} call(s)" in p.stdout and f"${n_requests * 0.0054:.4f}" in p.stdout
    assert json.loads((tmp_path / "best" / "summary.json").read_text())["tasks"][0]["status"] == "exported"


@pytest.mark.slow
def test_killed_run_resumes_without_buying_a_stored_answer_again(tmp_path):
    """Every first answer has no code, and the follow-ups hang until the run is killed: the first
    answers are stored, their children never made. The resumed run must reuse them."""
    state = {"hang": True}

    def responder(body, n):
        if len(body["messages"]) == 2:
            return f"I would tile the rows differently ({n})."
        if state["hang"]:
            time.sleep(30)
        return kernel_variant(n, CHEAP)

    with LLMServer(responder=responder) as s:
        c = cmd(tmp_path, "--model", "test-model", "--base-url", s.url, "--generations", "1", "--device", "cpu")
        proc = subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env())
        deadline = time.monotonic() + 300
        stored = []
        while time.monotonic() < deadline and len(stored) < 4:
            time.sleep(0.1)
            try:
                stored = db(tmp_path).execute("select request_hash, response from llm_calls").fetchall()
            except sqlite3.Error:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert len(stored) >= 4, "gen 0 asks 2 islands x 2 mutants"
        first_run = len(s.requests)
        state["hang"] = False
        p = subprocess.run(c, capture_output=True, text=True, timeout=600, env=env())
        assert p.returncode == 0, p.stderr[-3000:]
        resumed = s.requests[first_run:]
    stored_hashes = {h for h, _ in stored}
    assert not {request_hash(b) for b in resumed} & stored_hashes, "a stored answer was bought again"
    # the stored answers were used: follow-ups quoting them were sent
    quoted = {b["messages"][2]["content"] for b in resumed if len(b["messages"]) == 4}
    assert {text for _, text in stored} <= quoted
    conn = db(tmp_path)
    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert conn.execute("select count(*) from (select request_hash from llm_calls group by request_hash "
                        "having count(*) > 1)").fetchone()[0] == 0


def batch_output(requests_path: Path, start: int) -> str:
    lines = []
    for i, line in enumerate(requests_path.read_text().splitlines()):
        req = json.loads(line)
        body = completion(req["body"], kernel_variant(start + i, CHEAP))
        lines.append(json.dumps({"id": f"batch_req_{i}", "custom_id": req["custom_id"],
                                 "response": {"status_code": 200, "request_id": f"r{i}", "body": body},
                                 "error": None}))
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_exchange_round_trip_with_batch_files_and_llm_batch(tmp_path):
    ex = tmp_path / "exchange"
    c = cmd(tmp_path, "--model", "test-model", "--llm-exchange", str(ex), "--generations", "1", "--device", "cpu")
    p = subprocess.run(c, capture_output=True, text=True, timeout=600, env=env(key=None))
    assert p.returncode == 3, p.stderr[-3000:]
    assert "waiting for LLM answers: wrote 4 request(s)" in p.stdout
    round1 = [json.loads(x) for x in (ex / "requests.jsonl").read_text().splitlines()]
    assert len(round1) == 4 and all(r["method"] == "POST" and r["url"] == "/v1/chat/completions"
                                    and r["body"]["model"] == "test-model" and r["custom_id"] for r in round1)
    assert db(tmp_path).execute("select count(*) from populations").fetchone()[0] == 0

    (ex / "output.jsonl").write_text(batch_output(ex / "requests.jsonl", 100))
    p = subprocess.run(c, capture_output=True, text=True, timeout=600, env=env(key=None))
    assert p.returncode == 3, p.stderr[-3000:]
    assert "4 new answer(s) imported" in p.stdout
    conn = db(tmp_path)
    assert conn.execute("select max(generation) from populations").fetchone()[0] == 0
    used = conn.execute("select count(*) from candidates where source like '%_VARIANT = 10%'").fetchone()[0]
    assert used == 4
    round2 = [json.loads(x) for x in (ex / "requests.jsonl").read_text().splitlines()]
    assert round2 and not {r["custom_id"] for r in round2} & {r["custom_id"] for r in round1}

    with LLMServer(responder=lambda body, n: kernel_variant(200 + n, CHEAP)) as s:
        p = subprocess.run([*RUN, "llm-batch", str(ex), "--base-url", s.url, "--poll", "0.05"],
                           capture_output=True, text=True, timeout=120, env=env())
        assert p.returncode == 0, p.stderr
        assert len(s.requests) == len(round2)
    assert (ex / "output-batch-1.jsonl").exists() and "answers in" in p.stdout
    p = subprocess.run(c, capture_output=True, text=True, timeout=600, env=env(key=None))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    conn = db(tmp_path)
    assert conn.execute("select max(generation) from populations").fetchone()[0] == 1
    assert conn.execute("select count(*) from llm_calls where source like 'batch:output-batch-1%'").fetchone()[0] \
        == len(round2)
    # imported answers learn their task when used: the report counts calls per task
    assert conn.execute("select count(*) from llm_calls where source like 'batch:%' and task is null").fetchone()[0] \
        == 0


@pytest.mark.parametrize("extra, environment, message", [
    (["--operators", "llm"], "k", "--operators llm needs a model"),
    (["--model", "test-model"], None, "needs an API key in OPENAI_API_KEY"),
    (["--model", "test-model", "--base-url", "http://127.0.0.1:9/v1"], "k", "cannot reach the LLM endpoint"),
    (["--model", "nope", "--base-url", "URL"], "k", "does not serve model 'nope'"),
    (["--model", "local", "--base-url", "URL", "--max-cost", "1"], "k", "give --llm-price IN,OUT"),
    (["--model", "test-model", "--base-url", "URL", "--temperature", "hot"], "k", "--temperature takes"),
])
@pytest.mark.slow
def test_bad_llm_input_is_one_line_at_start(tmp_path, extra, environment, message):
    with LLMServer(models=("test-model", "local")) as s:
        extra = [s.url if x == "URL" else x for x in extra]
        p = subprocess.run(cmd(tmp_path, *extra), capture_output=True, text=True, timeout=120,
                           env=env(key=environment))
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize("answer, status_word", [
    # 2 MB of babble: every attempt fails, recorded; the 8th ends the LLM with why; the run exports and fails
    ("x" * (2 << 20), "answers held no usable code"),
    ((404, {"error": {"message": "The model `test-model` does not exist"}}, {}), "refused"),
], ids=["2MB-answer", "404-model"])
@pytest.mark.slow
def test_unusable_endpoint_answers_are_recorded_not_crashes(tmp_path, answer, status_word):
    with LLMServer(responder=lambda body, n: answer, models=None) as s:
        p = subprocess.run(cmd(tmp_path, "--model", "test-model", "--base-url", s.url, "--generations", "1",
                               "--device", "cpu"), capture_output=True, text=True, timeout=600, env=env())
    # the run could not do its job: it says so, how to go on, and exits 1 (issue 52: `finished`, exit 0)
    assert p.returncode == 1, p.stderr[-3000:]
    assert status_word in p.stderr
    assert p.stdout.splitlines()[-1].startswith("failed: the model could not be used (see above); what finished is "
                                                f"kept; once it can, go on with `python run.py resume {tmp_path}")
    conn = db(tmp_path)
    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert conn.execute("select status from runs").fetchall() == [("failed",)]
    errors = conn.execute("select error, parse_error from llm_calls").fetchall()
    assert errors and all(e or pe for e, pe in errors)
    assert json.loads((tmp_path / "best" / "summary.json").read_text())["tasks"][0]["status"] == "exported"
