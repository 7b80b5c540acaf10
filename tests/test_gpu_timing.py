"""GPU timing produces complete, self-consistent rows (values are machine-dependent: the
numbers themselves are reported by bench/evaluator_bench.py, never asserted here)."""
import math

import pytest
import torch

from fitness.gpu_timing import SetCache
from fitness.harness import InputCache


def test_set_cache_draws_once_and_matches_the_case_seed(builtin):
    task = builtin["softmax"]
    case = {"shape": {"M": 8, "N": 16}, "dtype": "float32", "seed": 7}
    cache = SetCache(1 << 20, device="cpu")
    draw, spare = cache.get(task, case)
    # the timed draw is the case's own; the spare differs from it
    assert torch.equal(draw[0], InputCache(1 << 20).get(task, case)[0])
    assert not torch.equal(draw[0], spare[0])
    again = cache.get(task, case)
    assert again[0][0] is draw[0] and again[1][0] is spare[0]  # kept, not drawn again


def test_set_cache_drops_the_least_recently_used_case(builtin):
    task = builtin["softmax"]
    cases = [{"shape": {"M": 64, "N": 64}, "dtype": "float32", "seed": s} for s in (1, 2, 3)]
    case_bytes = 2 * 64 * 64 * 4
    cache = SetCache(2 * case_bytes, device="cpu")
    for c in cases[:2]:
        cache.get(task, c)
    cache.get(task, cases[0])  # case 0 is now the most recent
    cache.get(task, cases[2])
    assert set(cache.items) == {task.case_key(cases[0]), task.case_key(cases[2])}
    assert cache.bytes == 2 * case_bytes


@pytest.mark.gpu
def test_timed_verdict_has_rows_floors_and_a_speedup(evaluator, builtin):
    task = builtin["softmax"]
    v = evaluator.evaluate(task, task.start_source)
    assert v.stage == "timed" and v.passed, v.reason
    assert len(v.times) == len(task.shapes.tuning) * len(task.dtypes)
    for row in v.times:
        assert row["candidate_ms"] > 0 and row["baseline_ms"] > 0 and row["floor_ms"] > 0
        assert row["method"] in ("cuda-graph", "eager") and row["input_sets"] >= 1
        assert set(row["phase_ms"]) == {"draw", "warm_up", "calibrate", "capture", "trials"}
    logs = [math.log(r["speedup"]) for r in v.times]
    assert v.speedup == pytest.approx(math.exp(sum(logs) / len(logs)))


@pytest.mark.gpu
def test_non_capturable_candidate_is_timed_eagerly(evaluator, builtin):
    """A host sync inside the call (.item()) breaks graph capture: both sides are timed eagerly."""
    task = builtin["softmax"]
    src = task.start_source.replace("    return y", "    _ = y[0, 0].item()\n    return y")
    assert src != task.start_source
    v = evaluator.evaluate(task, src)
    assert v.stage == "timed", v.reason
    assert {r["method"] for r in v.times} == {"eager"}


ZEROING = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _uniform(x_ptr, y_ptr, n, val, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    zero = offs.to(tl.float32) * 0.0
    tl.store(x_ptr + offs, zero, mask=m)  # wipes its own input
    tl.store(y_ptr + offs, zero + val, mask=m)


def softmax(x):  # softmax of a zeroed input is 1/N: right only if the baseline sees zeros too
    y = torch.empty_like(x)
    _uniform[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), 1.0 / x.shape[-1], BLOCK=1024)
    return y
'''


@pytest.fixture
def cpu_timer(monkeypatch):
    """The timing logic on CPU: events, sync and graphs stood in for; graph capture fails, so the
    eager path."""
    import time

    import fitness.gpu_timing as gt
    from fitness.harness import to_device

    class Event:
        def __init__(self, enable_timing=True):
            self.t = None

        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    def no_graphs(*a, **k):
        raise RuntimeError("no CUDA graphs on CPU")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for name, value in (("_Event", Event), ("_sync", lambda: None), ("_Graph", no_graphs), ("_graph_ctx", no_graphs),
                        ("_copies", lambda args: tuple(to_device(a, "cpu") for a in args))):
        monkeypatch.setattr(gt, name, value)
    timer = object.__new__(gt.Timer)
    timer.l2_bytes, timer.flush_buf, timer.sets = 1 << 16, torch.zeros(16), gt.SetCache(1 << 30, "cpu")
    return timer


NO_HOOK = type("Hook", (), {"launches": lambda self, m: 0})()
CASE = {"shape": {"M": 64, "N": 256}, "dtype": "float32", "seed": 7}


def test_a_candidate_that_zeroes_its_inputs_cannot_zero_the_baselines(builtin, cpu_timer, tmp_path):
    """The baseline runs on copies of its own, so it still computes the true softmax."""
    import importlib.util

    from fitness.harness import CandidateError

    path = tmp_path / "zeroing.py"
    path.write_text(ZEROING)
    spec = importlib.util.spec_from_file_location("zeroing_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    task = builtin["softmax"]
    with pytest.raises(CandidateError, match="candidate and baseline disagree"):
        cpu_timer.time_case(task, module.softmax, task.reference, "zeroing_candidate", NO_HOOK, lambda: None, CASE, 5)


def test_an_in_place_kernel_is_compared_after_as_many_calls_as_its_baseline(builtin, cpu_timer):
    """A suite's in-place kernel (rotary embedding, an output it accumulates into) returns its
    inputs: compared after two calls against one, the same kernel disagreed with itself (seen on
    the H100 with TritonBench's rotary_emb and triton_attention)."""
    import dataclasses

    task = dataclasses.replace(builtin["softmax"], script=object())  # a script task: results may be inputs

    def in_place(x):
        return x.mul_(3.0).add_(1.0)
    row = cpu_timer.time_case(task, in_place, in_place, "in_place", NO_HOOK, lambda: None, CASE, 5)
    assert row["method"] == "eager" and row["candidate_ms"] > 0


def test_a_kernel_the_timing_worker_rejects_is_no_longer_correct(evaluator, builtin, monkeypatch):
    """What the timing worker's own checks catch (a result captured into a graph, times beyond
    the wall clock) fails the candidate: it is neither a parent nor exported. The timing worker
    is stood in for by one that answers with such a finding (no GPU here)."""
    from fitness.verdict import Verdict

    class Refusing:
        def request(self, req, timeout_s, cancel=None, order=None):
            return {"error": "timed (graph) call on re-drawn inputs: candidate and baseline disagree"}
    monkeypatch.setattr(evaluator, "timer", Refusing())
    task = builtin["softmax"]
    v = Verdict(task.name, stage="correct", correct=True, heldout_correct=True)
    evaluator._timing(task, task.start_source, v)
    assert not v.correct and not v.passed and "re-drawn inputs" in v.reason and v.speedup is None


def test_input_cache_keeps_the_recently_used_case_past_its_budget(builtin):
    """A worker serves every task in turn: the case it used last stays, the oldest unused goes."""
    task = builtin["softmax"]
    cases = [{"shape": {"M": 64, "N": 64}, "dtype": "float32", "seed": s} for s in (1, 2, 3)]
    cache = InputCache(2 * 64 * 64 * 4)
    first = cache.get(task, cases[0])
    cache.get(task, cases[1])
    assert cache.get(task, cases[0])[0] is first[0]  # kept, not drawn again; now the most recent
    cache.get(task, cases[2])
    assert list(cache.items) == [task.case_key(cases[0]), task.case_key(cases[2])]
    assert cache.bytes == 2 * 64 * 64 * 4
