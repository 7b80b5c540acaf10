"""fitness/script_eval.py: a script task's reference results, computed once per task."""
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from fitness.pool import Cancelled
from fitness.script_eval import ScriptReferences


class SlowPool:
    """Answers a reference request after `delay` seconds, counting the requests."""

    def __init__(self, delay: float):
        self.delay, self.requests = delay, 0

    def request(self, req, timeout_s, cancel=None):
        self.requests += 1
        time.sleep(self.delay)
        return {"results": [{"tree": torch.arange(4.0), "torch_elements": 0} for _ in req["cases"]]}


def refs(pool):
    return ScriptReferences(pool, (0, 1), interpret=True, timeout_s=10, spec=lambda t: {"name": t.name})


def test_one_computation_per_task_and_a_stopping_caller_does_not_wait_for_it():
    pool, task = SlowPool(1.5), SimpleNamespace(name="t")
    r = refs(pool)
    first = threading.Thread(target=r.get, args=(task,))
    first.start()
    time.sleep(0.2)
    t0, stop = time.monotonic(), threading.Event()
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(Cancelled):
        r.get(task, stop.is_set)
    assert time.monotonic() - t0 < 1.2  # gave up before the reference was ready
    first.join()
    ref = r.get(task)  # cached: no second request
    assert pool.requests == 1 and not ref.error and not ref.weak and len(ref.results) == 3


class PerfPool:
    """A GPU worker's reference reply: a weak test, and benchmark inputs of the given sizes."""

    def __init__(self, sizes):
        self.sizes, self.perf_requests = sizes, []

    def request(self, req, timeout_s, cancel=None):
        if req["cases"][0]["kind"] == "perf":
            self.perf_requests.append([c["shape"]["perf"] for c in req["cases"]])
        return {"results": [{"tree": torch.tensor(1.0), "torch_elements": 0} for _ in req["cases"]],
                "perf_count": len(self.sizes), "perf_bytes": self.sizes}


def test_benchmark_inputs_too_large_to_draw_for_every_candidate_are_not_timed():
    from fitness.script_eval import MAX_TIMED_BYTES, timing_inputs

    big, small = MAX_TIMED_BYTES + 1, 1 << 20
    assert timing_inputs([small, big, 0, big]) == [0, 2]
    assert timing_inputs([big, big // 2 + big, big]) == [0]  # none small enough: the smallest
    assert timing_inputs([]) == []
    sizes = [small] * 9 + [big] * 3  # a suite's list growing past the bound
    pool = PerfPool(sizes)
    ref = ScriptReferences(pool, (0, 1), interpret=False, timeout_s=10, spec=lambda t: {"name": t.name}) \
        .get(SimpleNamespace(name="t"))
    assert ref.timed == (0, 2, 3, 5, 6, 8) and set(ref.heldout_perf) <= {1, 4, 7}
    assert pool.perf_requests == [list(ref.timed) + list(ref.heldout_perf)]
