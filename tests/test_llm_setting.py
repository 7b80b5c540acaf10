"""--setting instruction (GEAK's): the LLM writes generation 0 from the instruction and interface
and never sees the reference's code, the starting kernel's body or any task of the searched suite
(checked over every request body the local server received); the setting is kept with the run and
shown in the report. And entry points that are classes or several names are asked for and taken
as what they are."""
import ast
import os
import random
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from archives.archive import Archive
from evolve.config import RunConfig
from evolve.llm_setup import corpus_suites
from evolve.task_search import SearchConfig, Shared, TaskSearch
from fitness.engine.verdict import Verdict
from operators.base import Context
from operators.llm_client import LLMClient, LLMConfig
from operators.llm_ops import LLMMutate
from operators.registry import LLMSetup, llm_operators
from operators.retrieval import Retriever, corpus_from_suites, reference_source
from tests.llm_server import LLMServer

ROOT = Path(__file__).resolve().parent.parent
DATA = os.environ.get("TRITON_EVOLVE_DATA", "/work/shared/suites")

# a correct softmax that shares no line with the builtin starting kernel or reference
OWN = '''import torch
import triton
import triton.language as tl


@triton.jit
def _row_softmax(inp, out, width, in_pitch, out_pitch, CHUNK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, CHUNK)
    keep = offs < width
    v = tl.load(inp + r * in_pitch + offs, mask=keep, other=-float("inf")).to(tl.float32)
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out + r * out_pitch + offs, e / tl.sum(e, axis=0), mask=keep)


def softmax(x):
    rows, width = x.shape
    res = torch.empty_like(x)
    _row_softmax[(rows,)](x, res, width, x.stride(0), res.stride(0), CHUNK=triton.next_power_of_2(width))
    return res
'''


def own_variant(body, n):
    return f"Strategy: one pass per row.\n```python\n{OWN}\n_VARIANT = {n}\n```\n"


def secret_lines(sources, allowed=""):
    """Distinctive lines of code bodies: long enough not to be boilerplate, and absent from what
    the prompts may legitimately hold (the LLM's own kernels, the interface's signature lines)."""
    out = set()
    for src in sources:
        for line in (src or "").splitlines():
            s = line.strip()
            if len(s) >= 25 and not s.startswith(("import ", "from ", "def ", "class ", "@")) and s not in allowed:
                out.add(s)
    return out


def leaks(requests, secrets):
    text = "\n".join(m["content"] for b in requests for m in b["messages"])
    return sorted(s for s in secrets if s in text)


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return {**e, "OPENAI_API_KEY": "k"}


def search_cmd(tmp, *extra):
    return [sys.executable, str(ROOT / "run.py"), "--suite", "builtin", "--tasks", "softmax", "--islands", "2",
            "--population", "2", "--generations", "1", "--workers", "2", "--archive", str(tmp / "a.db"),
            "--export", str(tmp / "best"), *extra]


@pytest.mark.slow
def test_instruction_run_shows_no_reference_start_or_suite_code(tmp_path, builtin):
    with LLMServer(responder=own_variant) as s:
        p = subprocess.run(search_cmd(tmp_path, "--setting", "instruction", "--model", "test-model", "--base-url",
                                      s.url), capture_output=True, text=True, timeout=600, env=env())
        assert p.returncode == 0, p.stderr[-3000:]
        requests = list(s.requests)
        # a resume may not change the setting
        again = subprocess.run(search_cmd(tmp_path, "--setting", "optimize", "--model", "test-model", "--base-url",
                                          s.url), capture_output=True, text=True, timeout=600, env=env())
    assert again.returncode == 2 and "--setting instruction (this command: optimize)" in again.stderr
    firsts = [b for b in requests if "Triton practice" in b["messages"][-1]["content"]]
    assert len(firsts) >= 4, "generation 0 is written afresh on every place"
    assert any("def softmax(x: torch.Tensor) -> torch.Tensor: ..." in b["messages"][-1]["content"] for b in firsts)
    sources = [t.start_source for t in builtin.values()] + [reference_source(t) for t in builtin.values()]
    secrets = secret_lines(sources, allowed=OWN)
    assert "n_rows, n_cols = x.shape" not in OWN and secrets, "the check has something to find"
    assert leaks(requests, secrets) == []
    archive = Archive(tmp_path / "a.db")
    run = archive.latest_run()
    assert run.config["setting"] == "instruction"
    rows = archive.candidates(run.id, "softmax")
    assert all(r.operator == "llm_generate" and not r.parent_ids for r in rows if r.generation == 0 and r.island >= 0)
    starts = {r.id for r in rows if r.operator == "start"}
    assert starts and not any(starts & set(r.parent_ids) for r in rows), "the start is nobody's parent"
    archive.close()
    rep = subprocess.run([sys.executable, str(ROOT / "run.py"), "report", "--archive", str(tmp_path / "a.db"), "--out",
                          str(tmp_path / "rep")], capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "setting instruction" in md and "Accuracy by setting" in md
    row = next(line for line in md.splitlines() if line.startswith("| instruction |"))
    assert "| 1 | 100" in row, row  # one task; its exported kernel (an LLM one) ran and passes


def test_the_knob_operators_cannot_run_the_instruction_setting(tmp_path):
    p = subprocess.run(search_cmd(tmp_path, "--setting", "instruction"), capture_output=True, text=True,
                       timeout=120, env=env())
    assert p.returncode == 2 and "--setting instruction needs an LLM" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def tritonbench():
    from suites.registry import SuiteError, load_suite

    try:
        return load_suite("tritonbench", DATA)
    except SuiteError as e:
        pytest.skip(f"no TritonBench data here: {e}")


def test_corpus_leaves_out_the_searched_suite(tritonbench):
    run = RunConfig(suite="tritonbench", suite_path=DATA)
    assert "tritonbench" in corpus_suites(run, "optimize")
    blind = corpus_suites(run, "instruction")
    assert "tritonbench" not in blind and "builtin" in blind
    examples = corpus_from_suites(blind)
    assert examples and not any(e.name.startswith("tritonbench/") for e in examples)


def _class_answer(body, n):
    return ("Strategy: fresh.\n```python\nimport torch\n\n\n"
            "class FifthOrderSphericalHarmonic(torch.autograd.Function):"
            f"\n    @staticmethod\n    def forward(ctx, coords):\n        return coords * {n}\n```\n")


def test_tritonbench_instruction_prompts_hold_no_suite_code(tmp_path, builtin, tritonbench):
    task = tritonbench["fifth_order_sph_harmonics"]
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("tritonbench", {"setting": "instruction"})

    def evaluate(t, source):
        f = Future()
        f.set_result(Verdict(t.name, stage="timed", correct=True, heldout_correct=True, speedup=1.0))
        return f
    with LLMServer(responder=_class_answer) as server:
        client = LLMClient(LLMConfig("test-model", server.url, "k", backoff_s=0.01), archive, run)
        # builtin stands for the other suites; the searched one is out, as corpus_suites leaves it
        retriever = Retriever(corpus_from_suites({"builtin": builtin}))
        ops = llm_operators(LLMSetup(client, "gpu", retriever, "tritonbench"))
        config = SearchConfig(islands=2, population=2, generations=2, setting="instruction")
        assert str(TaskSearch(task, ops, config, Shared(archive, run, evaluate, threading.Event())).run()) == "done"
        requests = list(server.requests)
    archive.close()
    allowed = "\n".join(m["content"] for b in requests for m in b["messages"] if m["role"] == "assistant")
    allowed += "".join(_class_answer(None, n) for n in range(len(requests) + 2))
    builtin_code = "\n".join(s for t in builtin.values() for s in (t.start_source, reference_source(t)))
    shown = allowed + builtin_code + task.instruction  # the instruction may quote code: it is meant to be seen
    secrets = secret_lines([s for t in tritonbench.values() for s in (reference_source(t), t.start_source)], shown)
    assert len(secrets) > 1000 and leaks(requests, secrets) == []
    assert all("the class `FifthOrderSphericalHarmonic`" in b["messages"][0]["content"] for b in requests)
    assert not any("def FifthOrderSphericalHarmonic" in m["content"] for b in requests for m in b["messages"])


# -- entry forms: the prompt names what the module must define; a class answer is taken at once ----
@pytest.mark.parametrize("entry,source,first,phrase", [
    ("softmax", "def softmax(x):\n    pass\n", "def softmax(x):\n    return x\n", "the function `softmax`"),
    ("FifthOrderSphericalHarmonic", "class FifthOrderSphericalHarmonic:\n    pass\n",
     "import torch\nclass FifthOrderSphericalHarmonic(torch.autograd.Function):\n    pass\n",
     "the class `FifthOrderSphericalHarmonic`"),
    ("fwd, bwd", "def fwd(x):\n    pass\ndef bwd(x):\n    pass\n", "def fwd(x):\n    return x\n",
     "the functions `fwd` and `bwd`"),
])
def test_entry_forms_are_asked_for_and_taken_as_they_are(tmp_path, entry, source, first, phrase):
    both = "def fwd(x):\n    return x\n\n\ndef bwd(x):\n    return x\n"
    answers = [first, both]
    archive = Archive(tmp_path / "a.db")
    run = archive.new_run("x", {})
    with LLMServer(responder=lambda body, n: f"Strategy: s.\n```python\n{answers[n - 1]}```\n") as server:
        client = LLMClient(LLMConfig("test-model", server.url, "k", backoff_s=0.01), archive, run)
        from operators.base import Parent
        from operators.interface import entry_phrase
        from tests.candidates import candidate

        ctx = Context("t", "do it", entry, entry_form=entry_phrase(entry, source))
        start = Parent(candidate(1, source, correct=True, stage="correct"))
        child = LLMMutate(client, "gpu").propose([start], ctx, random.Random(0))
        requests = list(server.requests)
    archive.close()
    several = "," in entry
    assert child is not None and child.source == (both if several else first)
    assert len(requests) == (2 if several else 1), "a follow-up only where a name was missing"
    for b in requests:
        assert phrase in b["messages"][0]["content"] and phrase in b["messages"][1]["content"]
    if several:  # the follow-up names what is missing, and asks for both names
        follow = requests[1]["messages"][-1]["content"]
        assert "`fwd` and `bwd`" in follow and f"defines {phrase}" in follow
    texts = [m["content"] for b in requests for m in b["messages"]]
    assert not any(f"def {entry}" in t for t in texts if entry[0].isupper())
    assert ast.parse(child.source)
