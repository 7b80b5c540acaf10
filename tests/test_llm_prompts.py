"""What the LLM operators are told, and when a task stops asking (real openai client, local
chat-completions server, real archive; a stand-in evaluator gives timing rows like the GPU's):
prompts name each timed shape's inputs, roofline share and launch-bound mark; the history's
speedups are against the run's median baseline; --patience ends a task and counts the calls it
spared; a partial answer file lets the answered tasks go on while the rest wait."""
import json
import threading
from concurrent.futures import Future

import pytest
import torch

from archives.archive import Archive
from evolve.llm_setup import saved_text
from evolve.task_search import Halt, SearchConfig, Shared, TaskSearch
from fitness.common.replies import PeakFigures, Prepared
from fitness.engine.trials import timed_row
from fitness.engine.verdict import Verdict, speedup_from_rows
from operators.llm_client import LLMClient, LLMConfig
from operators.llm_exchange import Exchange, import_answers
from operators.registry import LLMSetup, llm_operators
from operators.retrieval import Retriever, corpus_from_suites
from suites.script import describe_inputs
from tests.llm_server import LLMServer, softmax_variant
from tests.timing_rows import timing_row

PEAKS = PeakFigures(bandwidth_Bps=3.0e12, flops=1.0e15, l2_bytes=50 << 20, device="stand-in")


def timed_verdict(task, source, baseline_ms):
    """Two timed shapes of a script task: one large (memory-bound, near its floor), one tiny."""
    fast = 1.0 + (len(source) % 7) / 10
    rows = [timing_row({"perf": 0}, "given", 0.9 / fast, baseline_ms, bytes=2.0e9 * 0.3 / 1e3, flops=0.0,
                       describe="float16[4096, 4096], float32[4096] strides (2,)"),
            timing_row({"perf": 1}, "given", 0.004, 0.004, bytes=1e6, flops=2e6, describe="float16[64, 64]")]
    rows, speedup, flags = speedup_from_rows(rows, PEAKS)
    return Verdict(task.name, stage="timed", correct=True, heldout_correct=True, speedup=speedup, times=rows,
                   flags=flags)


def searcher(archive, run, ops, config, evaluate, task):
    return TaskSearch(task, ops, config, Shared(archive, run, evaluate, threading.Event()))


def llm_ops(archive, run, url, builtin, exchange=None):
    client = LLMClient(LLMConfig("test-model", url, "k", backoff_s=0.01), archive, run, exchange)
    return client, llm_operators(LLMSetup(client, "gpu", Retriever(corpus_from_suites({"builtin": builtin})),
                                          "builtin"))


def test_prompts_carry_inputs_roofline_and_the_stable_baseline(tmp_path, builtin):
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("builtin", {})
    baselines = iter([1.0, 1.4, 0.6] + [1.0] * 100)  # a baseline that wanders between timings

    def evaluate(task, source):
        f = Future()
        f.set_result(timed_verdict(task, source, next(baselines)))
        return f

    with LLMServer(responder=lambda body, n: softmax_variant(n)) as server:
        _, ops = llm_ops(archive, run, server.url, builtin)
        mutate_only = [w for w in ops if w.operator.name == "llm_mutate"]
        config = SearchConfig(islands=1, population=3, generations=2, migration_interval=100)
        assert str(searcher(archive, run, mutate_only, config, evaluate, builtin["softmax"]).run()) == "done"
        prompts = [b["messages"][-1]["content"] for b in server.requests]
    last = prompts[-1]
    assert "perf=0 (float16[4096, 4096], float32[4096] strides (2,))" in last
    assert "perf=1 (float16[64, 64])" in last and "launch-bound (under 10 us)" in last
    # shape 0: floor 0.2 ms (0.6 GB at 3 TB/s); the start runs it in 0.9/fast ms
    assert "% of the roofline (" in last and "GB/s" in last and "TFLOP/s achieved" in last
    # every attempt's shape-0 time is against the run's median baseline (1.0 ms), not its own 1.4 or 0.6
    history = last.split("The kernel to improve now")[0]
    assert history.count("vs baseline 1.0000 ms") >= 2 and "vs baseline 1.4000" not in history
    assert "vs baseline 0.6000" not in history and "against the run's median baseline" in history
    archive.close()


def test_patience_ends_a_task_and_counts_the_calls_it_spared(tmp_path, builtin):
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("builtin", {})

    def evaluate(task, source):  # no child ever beats the start
        f = Future()
        f.set_result(Verdict(task.name, stage="timed", correct=True, heldout_correct=True, speedup=1.0))
        return f

    with LLMServer(responder=lambda body, n: softmax_variant(n)) as server:
        _, ops = llm_ops(archive, run, server.url, builtin)
        config = SearchConfig(islands=2, population=3, generations=6, migration_interval=100, patience=2)
        end = searcher(archive, run, ops, config, evaluate, builtin["softmax"]).run()
        asked = len(server.requests)
    assert end.halt is Halt.PATIENCE
    # generations 1 and 2 made nothing better than generation 0: stopped before generation 3
    assert archive.last_generation(run, "softmax")[0] == 2
    assert end.saved_calls == 4 * 2 * 3  # 4 generations left x 2 islands x 3, every operator an LLM one
    assert asked < 7 * 2 * 3
    assert saved_text({"softmax": end}) == \
        "; early stopping saved about 24 LLM call(s) (softmax: no improvement (patience))"
    archive.close()


def test_partial_answer_file_lets_answered_tasks_go_on(tmp_path, builtin):
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("builtin", {})
    ex_dir = tmp_path / "exchange"

    def evaluate(task, source):
        f = Future()
        f.set_result(Verdict(task.name, stage="timed", correct=True, heldout_correct=True, speedup=1.0))
        return f

    config = SearchConfig(islands=1, population=3, generations=2, migration_interval=100)
    tasks = [builtin["softmax"], builtin["cumsum"]]

    def round_():
        exchange = Exchange(ex_dir)
        client, ops = llm_ops(archive, run, "http://127.0.0.1:9/v1", builtin, exchange)
        new = import_answers(exchange, client)
        ends = {t.name: searcher(archive, run, ops, config, evaluate, t).run() for t in tasks}
        counts = exchange.pending_counts()
        exchange.write_requests()
        return new, ends, counts

    _, ends, counts = round_()
    assert {e.halt for e in ends.values()} == {Halt.WAITING}
    assert counts == {("softmax", "llm_mutate"): 2, ("cumsum", "llm_mutate"): 2}
    requests = [json.loads(x) for x in (ex_dir / "requests.jsonl").read_text().splitlines()]
    answered = [r for r in requests if "Task `softmax`" in r["body"]["messages"][-1]["content"]]
    assert len(answered) == 2
    lines = [{"custom_id": r["custom_id"], "response": {"status_code": 200, "body": {
        "choices": [{"message": {"content": softmax_variant(i)}}], "usage": {}}}} for i, r in enumerate(answered)]
    (ex_dir / "output-part.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    new, ends, counts = round_()
    assert new == 2
    assert archive.last_generation(run, "softmax")[0] == 0, "the answered task made its generation 0"
    assert archive.last_generation(run, "cumsum") is None, "the unanswered one still waits"
    assert counts[("cumsum", "llm_mutate")] == 2 and counts[("softmax", "llm_mutate")] >= 1
    assert {e.halt for e in ends.values()} == {Halt.WAITING}
    archive.close()


def test_timing_rows_name_their_inputs():
    args = (torch.zeros(8, 4, dtype=torch.float16), torch.zeros(4, 8).t(), 3, [torch.zeros(2)], None)
    text = describe_inputs(args)
    assert text == "float16[8, 4], float32[8, 4] strides (1, 8), 3, [float32[2]], None"
    plan = {"case": {"shape": {"perf": 2}, "dtype": "given"}}
    cal = {"b": Prepared(t_one_ms=0.01, in_bytes=64, l2_bytes=4096, cost=(1e6, 0.0), describe=text),
           "c": Prepared(t_one_ms=0.01, in_bytes=64, l2_bytes=4096)}
    row = timed_row(plan, {"c": [0.5, 0.4, 0.6], "b": [1.0, 1.0, 1.1]}, "graph", 1, cal)
    assert row.describe == text and row.candidate_ms == 0.5 and row.bytes == 1e6


def test_the_roofline_stop_and_the_stable_speedup_read_the_exports_best_kernel():
    from archives.records import Candidate, Evaluation
    from evolve.stopping import at_roofline
    from operators.shape_facts import stable_speedup

    def kernel(i, speedup, floor_ms, heldout=True):
        times = (timing_row({"N": 1}, "float32", 1.0, speedup, floor_ms=floor_ms),) if speedup else ()
        ev = Evaluation(i, "timed" if speedup else "correct", True, heldout, heldout, speedup, "", "gpu", times=times)
        return Candidate(i, 1, "t", 0, 1, f"s{i}", f"h{i}", (), "op", "", evaluation=ev)
    # the fastest passes held-out and runs at 95% of the roofline; a faster one failed held-out
    rows = [kernel(1, 1.0, 0.5), kernel(2, 2.0, 0.95), kernel(3, 3.0, 0.1, heldout=False), kernel(4, None, 0)]
    assert at_roofline(rows, 0.9) and not at_roofline(rows, 0.96)
    assert not at_roofline([kernel(4, None, 0)], 0.1)  # untimed: no roofline to be near
    assert stable_speedup([timing_row({"N": 1}, "float32", 2.0, 1.0), timing_row({"N": 2}, "float32", 1.0, 8.0)],
                          {"N=1|float32": 4.0}) == pytest.approx(4.0)  # sqrt(4/2 * 8/1)
    assert stable_speedup([], {}) is None
