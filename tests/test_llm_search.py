"""The LLM operators inside the per-task search (real openai client, local server, a stand-in
evaluator): failed children are repaired with their trace, a lineage is dropped for a fresh kernel
after --max-debug failed repairs, and children link to the calls that made them."""
import threading
from concurrent.futures import Future

from archives.archive import Archive
from archives.records import RunStatus
from evolve.session import run_status
from evolve.task_end import Halt
from evolve.task_search import SearchConfig, Shared, TaskSearch
from fitness.engine.verdict import Verdict
from operators.llm_client import LLMClient, LLMConfig
from operators.registry import LLMSetup, llm_operators
from operators.retrieval import Retriever, corpus_from_suites
from tests.llm_server import LLMServer, softmax_variant


def kind(body) -> str:
    text = body["messages"][-1]["content"]
    for marker, name in (("fails the evaluator", "repair"), ("Triton practice", "generate"),
                         ("Two correct kernels", "crossover"), ("earlier kernels", "mutate")):
        if marker in text:
            return name
    return "followup"


def responder(body, n):
    """Generation writes working kernels; everything else writes broken ones."""
    if kind(body) == "generate":
        return softmax_variant(n)
    return softmax_variant(n, "Reflection: the grid was wrong.").replace("_VARIANT", "# BROKEN\n_VARIANT")


def evaluate(task, source):
    f = Future()
    if "BROKEN" in source:
        f.set_result(Verdict(task.name, stage="call", reason=f"Traceback ...\nRuntimeError: boom {len(source)}"))
    else:
        f.set_result(Verdict(task.name, stage="timed", correct=True, heldout_correct=True, speedup=1.0))
    return f


def test_failed_children_are_repaired_then_dropped_after_max_debug(tmp_path, builtin):
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("builtin", {})
    with LLMServer(responder=responder) as server:
        client = LLMClient(LLMConfig("test-model", server.url, "k", backoff_s=0.01), archive, run)
        retriever = Retriever(corpus_from_suites({"builtin": builtin}))
        ops = llm_operators(LLMSetup(client, "gpu", retriever, "builtin", max_debug=2))
        config = SearchConfig(islands=2, population=4, generations=5, migration_interval=100,
                              temperatures=(0.6, 1.2))
        ts = TaskSearch(builtin["softmax"], ops, config, Shared(archive, run, evaluate, threading.Event()))
        assert str(ts.run()) == "done"
        repair_prompts = [b["messages"][-1]["content"] for b in server.requests if kind(b) == "repair"]
        temps = {b.get("temperature") for b in server.requests}
    rows = {r.id: r for r in archive.candidates(run, "softmax")}

    def depth(r):
        d = 0
        while r.operator == "llm_repair":
            d += 1
            r = rows[r.parent_ids[0]]
        return d

    repairs = [r for r in rows.values() if r.operator == "llm_repair"]
    assert repairs and max(depth(r) for r in repairs) == 2, "lineages end at --max-debug repairs"
    for r in repairs:  # each repair answers a failure of its island's previous generation
        p = rows[r.parent_ids[0]]
        assert not p.correct and p.generation == r.generation - 1 and p.island == r.island
    dropped = [r for r in rows.values() if r.note.startswith("lineage dropped after 2 failed repairs")]
    assert dropped and all(r.operator == "llm_generate" and depth(rows[r.parent_ids[0]]) == 2
                           for r in dropped)
    assert all("RuntimeError: boom" in t for t in repair_prompts)
    assert any("1. the grid was wrong." in t for t in repair_prompts), "the lineage's reflection is shown"
    assert temps == {0.6, 1.2}
    # every LLM child links to the call(s) that made it
    linked = {r[0] for r in archive.db.execute("select candidate_id from llm_calls where candidate_id is not null")}
    assert {r.id for r in rows.values() if r.operator.startswith("llm_")} <= linked
    archive.close()


def _search_with(tmp_path, builtin, server, llm_config):
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("builtin", {})
    client = LLMClient(llm_config, archive, run)
    ops = llm_operators(LLMSetup(client, "gpu", Retriever(corpus_from_suites({"builtin": builtin})), "builtin"))
    config = SearchConfig(islands=1, population=2, generations=3, temperatures=(0.6,))
    return TaskSearch(builtin["softmax"], ops, config, Shared(archive, run, evaluate, threading.Event())).run()


def test_a_model_that_never_writes_code_fails_the_run_and_a_spent_budget_does_not(tmp_path, builtin):
    """Issue 52: a model that never returned code ended the run `finished` (exit 0)."""
    with LLMServer(responder=lambda body, n: "I would use bigger blocks.") as server:
        end = _search_with(tmp_path / "a", builtin, server, LLMConfig("test-model", server.url, "k", backoff_s=0.01))
    assert end.halt is Halt.EXHAUSTED and end.unusable and "held no usable code" in end.detail
    assert run_status(False, {"softmax": end}) is RunStatus.FAILED
    assert run_status(True, {"softmax": end}) is RunStatus.INTERRUPTED
    with LLMServer(responder=lambda body, n: softmax_variant(n)) as server:
        end = _search_with(tmp_path / "b", builtin, server,
                           LLMConfig("test-model", server.url, "k", backoff_s=0.01, max_calls=1))
    assert end.halt is Halt.EXHAUSTED and not end.unusable and "budget spent" in end.detail
    assert run_status(False, {"softmax": end}) is RunStatus.FINISHED
