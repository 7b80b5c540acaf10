"""The LLM operators and client with the real `openai` SDK against a local chat-completions server:
what each prompt holds, retries, the one follow-up, usage and cost in the archive, the request
cache, budgets, and what a refusing or babbling endpoint does."""
import json
import random
import threading

import pytest

from archives.archive import Archive
from operators.base import Context, Exhausted, Parent
from operators.llm_client import LLMClient, LLMConfig, request_hash
from operators.llm_ops import PROMPTS, LLMCrossover, LLMGenerate, LLMMutate, LLMRepair
from operators.retrieval import Retriever, corpus_from_suites
from tests.candidates import candidate
from tests.llm_server import START, LLMServer, softmax_variant
from tests.timing_rows import timing_row

TIMES = (timing_row({"M": 64, "N": 256}, "float32", 0.1, 0.15),)


@pytest.fixture
def archive(tmp_path):
    a = Archive(tmp_path / "a.db")
    yield a
    a.close()


def client_for(server, archive, **cfg):
    run = archive.latest_run().id if archive.latest_run() else archive.new_run("builtin", {})
    config = LLMConfig(**{"model": "test-model", "base_url": server.url, "api_key": "k", "backoff_s": 0.01,
                          "timeout_s": 20, **cfg})
    return LLMClient(config, archive, run)


def context(**kw):
    return Context("softmax", "Softmax over the last dimension.", "softmax", island=1, generation=3,
                   temperature=0.9, **kw)


def parent(i, speedup, marker=""):
    return Parent(candidate(i, START + f"\n# kernel {marker or i}\n", speedup, True, "", stage="timed", times=TIMES,
                            note=f"strategy of {marker or i}"))


def user_text(body):
    return body["messages"][-1]["content"]


def calls(archive):
    return [dict(r) for r in archive.db.query("select * from llm_calls order by id")]


def test_mutate_prompt_has_history_ascending_best_last(archive):
    with LLMServer() as server:
        history = [parent(1, 1.5, "A"), parent(2, 0.7, "B"), parent(3, 1.2, "C")]
        op = LLMMutate(client_for(server, archive), "GPU FIGURES HERE")
        child = op.propose([parent(4, 1.1, "P")], context(history=history), random.Random(0))
        text = user_text(server.requests[0])
    pos = [text.index(f"# kernel {m}") for m in "BCA"]
    assert pos == sorted(pos), "history must run from slowest to fastest"
    assert text.index("speedup 0.700x") < text.index("speedup 1.200x") < text.index("speedup 1.500x")
    assert text.index("# kernel A") < text.index("# kernel P"), "the parent comes after the history"
    assert "0.1000 ms vs baseline 0.1500 ms" in text and "GPU FIGURES HERE" in text
    assert server.requests[0]["temperature"] == 0.9
    assert child.operator == "llm_mutate" and "_VARIANT = 1" in child.source
    assert child.note == "try a different block size."
    row = calls(archive)[0]
    assert child.llm_calls == [row["id"]] and row["request_hash"] == request_hash(server.requests[0])
    assert row["operator"] == "llm_mutate" and row["island"] == 1 and row["generation"] == 3


def test_crossover_gets_both_parents(archive):
    with LLMServer() as server:
        op = LLMCrossover(client_for(server, archive), "gpu")
        child = op.propose([parent(1, 1.3, "A"), parent(2, 0.9, "B")], context(), random.Random(0))
        text = user_text(server.requests[0])
        assert op.propose([parent(1, 1.3), parent(1, 1.3)], context(), random.Random(0)) is None
        assert len(server.requests) == 1  # one kernel twice: nothing to combine, nothing sent
    assert "# kernel A" in text and "# kernel B" in text
    assert "speedup 1.300x" in text and "speedup 0.900x" in text and "strategy of B" in text
    assert child.operator == "llm_crossover"


def test_repair_gets_the_trimmed_trace_and_lineage_reflections(archive):
    trace = "Traceback (most recent call last):\n" + "".join(f"  frame {i}\n" for i in range(200)) + \
        "IndexError: index 4096 is out of bounds"
    broken = Parent(candidate(9, START.replace("BLOCK=128", "BLOCK=100"), None, False, trace, stage="compile",
                              operator="llm_repair"), ("first: the mask was wrong", "second: BLOCK not pow2"))
    assert broken.repairs == 2
    with LLMServer(responder=lambda b, n: softmax_variant(n, "Reflection: BLOCK must be a power of two.")) as s:
        op = LLMRepair(client_for(s, archive), "gpu", None, max_debug=5)
        child = op.propose([broken], context(), random.Random(0))
        text = user_text(s.requests[0])
    assert "IndexError: index 4096 is out of bounds" in text and "BLOCK=100" in text
    assert "frame 199" in text and "frame 5\n" not in text, "the trace is trimmed, keeping its end"
    assert "1. first: the mask was wrong" in text and "2. second: BLOCK not pow2" in text
    assert "attempt 3 of at most 5" in text
    assert child.operator == "llm_repair" and child.note == "BLOCK must be a power of two."


def generate_op(client):
    from suites.registry import load_suite

    retriever = Retriever(corpus_from_suites({"builtin": load_suite("builtin")}))
    knowledge = (PROMPTS / "triton_notes.md").read_text()
    return LLMGenerate(client, "gpu", knowledge, retriever, "builtin")


def test_debugging_cap_turns_a_repair_into_a_fresh_generation(archive):
    with LLMServer() as s:
        client = client_for(s, archive)
        op = LLMRepair(client, "gpu", generate_op(client), max_debug=3)
        worn = Parent(candidate(9, "broken", None, False, "Error", stage="call", operator="llm_repair"),
                      ("a", "b", "c"))
        child = op.propose([worn], context(reference="def reference(x):\n    return torch.softmax(x, -1)\n"),
                           random.Random(0))
        text = user_text(s.requests[0])
    assert "Triton practice and pitfalls" in text and "broken" not in text
    assert "torch.softmax" in text  # the reference that defines the result
    example = text.split("An example of a Triton kernel module for a similar task (")[1].split(",")[0]
    assert example.startswith("builtin/") and example != "builtin/softmax"
    assert child.operator == "llm_generate" and child.note.startswith("lineage dropped after 3 failed repairs")


def test_429_then_200_is_retried(archive):
    def responder(body, n):
        if n == 1:
            return 429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"retry-after-ms": "20"}
        return softmax_variant(n)

    with LLMServer(responder=responder) as s:
        child = LLMMutate(client_for(s, archive), "gpu").propose([parent(1, 1.0)], context(), random.Random(0))
        assert len(s.requests) == 2 and s.requests[0] == s.requests[1]
    assert child is not None
    row = calls(archive)[0]
    assert row["attempts"] == 2 and row["error"] == ""


def test_5xx_past_the_retries_is_a_recorded_failure(archive):
    with LLMServer(responder=lambda b, n: (503, {"error": {"message": "overloaded"}}, {})) as s:
        child = LLMMutate(client_for(s, archive, retries=2), "gpu").propose([parent(1, 1.0)], context(),
                                                                             random.Random(0))
        assert len(s.requests) == 3
    assert child is None
    row = calls(archive)[0]
    assert "HTTP 503" in row["error"] and "gave up after 3 attempts" in row["error"] and row["response"] is None


def test_malformed_answer_gets_one_follow_up(archive):
    with LLMServer(responder=lambda b, n: "Use bigger blocks." if n == 1 else softmax_variant(n)) as s:
        child = LLMMutate(client_for(s, archive), "gpu").propose([parent(1, 1.0)], context(), random.Random(0))
        first, second = s.requests
    assert second["messages"][:2] == first["messages"]
    assert second["messages"][2] == {"role": "assistant", "content": "Use bigger blocks."}
    assert "no fenced ```python code block" in second["messages"][3]["content"]
    assert child is not None and len(child.llm_calls) == 2
    rows = calls(archive)
    assert rows[0]["parse_error"] and rows[0]["response"] == "Use bigger blocks." and rows[1]["parse_error"] is None


def test_answers_without_usable_code_are_recorded_failures(archive):
    answers = {1: "no code at all", 2: "```python\ndef other():\n    pass\n```", 3: "x" * (2 << 20)}
    with LLMServer(responder=lambda b, n: answers.get(n, "still nothing")) as s:
        op = LLMMutate(client_for(s, archive), "gpu")
        assert op.propose([parent(1, 1.0)], context(), random.Random(0)) is None
        assert len(s.requests) == 2  # one follow-up, then the attempt is failed
        assert op.propose([parent(2, 1.0)], context(), random.Random(0)) is None
        assert len(s.requests) == 3  # a 2 MB answer is not echoed back in a follow-up
    rows = calls(archive)
    assert "defines the entry point" in rows[1]["parse_error"]
    assert "over the 200000 limit" in rows[2]["parse_error"]
    assert rows[2]["response_chars"] == 2 << 20 and len(rows[2]["response"]) == 1 << 20  # kept, capped
    assert archive.db.execute("pragma integrity_check").fetchone()[0] == "ok"


def test_usage_and_cost_land_in_the_archive_and_a_stored_answer_is_not_bought_again(archive):
    with LLMServer(usage={"prompt_tokens": 1000, "completion_tokens": 500}) as s:
        client = client_for(s, archive, price=(2.0, 8.0))
        msgs = [{"role": "user", "content": "hi"}]
        first = client.complete(msgs, 0.7, {"task": "softmax", "operator": "t"})
        again = client.complete(msgs, 0.7, {"task": "softmax", "operator": "t"})
        other = client.complete(msgs, 0.8, {"task": "softmax", "operator": "t"})  # another temperature
        assert len(s.requests) == 2
    assert again.cached and again.text == first.text and not other.cached
    row = calls(archive)[0]
    assert (row["prompt_tokens"], row["completion_tokens"]) == (1000, 500)
    assert row["cost_usd"] == pytest.approx(1000 * 2.0 / 1e6 + 500 * 8.0 / 1e6)
    assert json.loads(row["messages"]) == msgs and row["model"] == "test-model"
    assert archive.llm_totals(row["run_id"]) == (2, pytest.approx(2 * 0.006))


def test_budgets_hold_with_calls_in_flight(archive):
    gate = threading.Event()

    def slow(body, n):
        gate.wait(10)
        return softmax_variant(n)

    with LLMServer(responder=slow) as s:
        client = client_for(s, archive, max_calls=3, concurrency=8)
        results = []

        def call(i):
            try:
                results.append(client.complete([{"role": "user", "content": str(i)}], None, {}))
            except Exhausted as e:
                results.append(e)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        threading.Timer(0.5, gate.set).start()
        for t in threads:
            t.join()
        assert len(s.requests) == 3
    assert sum(isinstance(r, Exhausted) for r in results) == 5
    with LLMServer(usage={"prompt_tokens": 10, "completion_tokens": 100}) as s:
        # each call costs $0.00101 and could cost up to ~$0.00106 (its bound): the 10th is not sent
        client = client_for(s, archive, max_cost=0.01, price=(1.0, 10.0), max_tokens=100)
        with pytest.raises(Exhausted, match="cost budget"):
            for i in range(100):
                client.complete([{"role": "user", "content": f"b{i}"}], None, {})
        assert len(s.requests) == 9 and client.budget.spent == pytest.approx(9 * 0.00101)


def test_a_rejected_model_is_recorded_and_stops_the_llm(archive):
    err = {"error": {"message": "The model `nope` does not exist", "type": "invalid_request_error"}}
    with LLMServer(responder=lambda b, n: (404, err, {})) as s:
        op = LLMMutate(client_for(s, archive), "gpu")
        with pytest.raises(Exhausted, match="does not exist"):
            op.propose([parent(1, 1.0)], context(), random.Random(0))
        with pytest.raises(Exhausted):
            op.propose([parent(2, 1.0)], context(), random.Random(0))
        assert len(s.requests) == 1
    assert "HTTP 404" in calls(archive)[0]["error"]


def test_a_200_that_is_not_a_chat_completion_is_a_recorded_failure(archive):
    with LLMServer(responder=lambda b, n: (200, {"unexpected": True}, {})) as s:
        child = LLMMutate(client_for(s, archive), "gpu").propose([parent(1, 1.0)], context(), random.Random(0))
        assert len(s.requests) == 1
    assert child is None and "no chat completion" in calls(archive)[0]["error"]


def test_a_model_that_never_writes_code_stops_the_llm_with_its_reason(archive):
    """Issue 41: a model that never returns a code block cost 24 calls and exited 0 with the
    reason never printed; its 8th answer without usable code in a row ends the LLM operators."""
    with LLMServer(responder=lambda b, n: "I would use bigger blocks.") as s:
        op = LLMMutate(client_for(s, archive), "gpu")
        for i in range(3):  # each a new request: a stored answer would be the same one again
            assert op.propose([parent(i, 1.0)], context(), random.Random(i)) is None
        with pytest.raises(Exhausted, match="first 8 answers held no usable code .*no fenced ```python code block"):
            op.propose([parent(3, 1.0)], context(), random.Random(3))
        assert len(s.requests) == 8


def test_a_model_that_has_written_code_is_not_stopped_by_later_misses(archive):
    with LLMServer(responder=lambda b, n: softmax_variant(n) if n == 1 else "nothing") as s:
        op = LLMMutate(client_for(s, archive), "gpu")
        assert op.propose([parent(1, 1.0)], context(), random.Random(0)) is not None
        for i in range(2, 7):
            assert op.propose([parent(i, 1.0)], context(), random.Random(i)) is None
