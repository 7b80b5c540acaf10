"""fitness/engine/script_eval.py: a script task's reference results, computed once per task."""
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from fitness.engine.pool import Cancelled
from fitness.engine.script_eval import ScriptReferences
from tests.stand_ins import Asks


class SlowPool(Asks):
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


class PerfPool(Asks):
    """A GPU worker's reference reply: a weak test, and benchmark inputs of the given sizes."""

    def __init__(self, sizes):
        self.sizes, self.perf_requests = sizes, []

    def request(self, req, timeout_s, cancel=None):
        if req["cases"][0]["kind"] == "perf":
            self.perf_requests.append([c["shape"]["perf"] for c in req["cases"]])
        return {"results": [{"tree": torch.tensor(1.0), "torch_elements": 0} for _ in req["cases"]],
                "perf_count": len(self.sizes), "perf_bytes": self.sizes}


def test_benchmark_inputs_too_large_to_draw_for_every_candidate_are_not_timed():
    from fitness.engine.script_eval import MAX_TIMED_BYTES, timing_inputs

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


class GuardPool(Asks):
    """A GPU worker's reference reply: a full test, ten benchmark inputs, and the guard-band
    check's findings (fitness.clean.guard_bands) for the inputs in `unstable`."""

    def __init__(self, unstable: dict):
        self.unstable, self.guard_requests = unstable, []

    def request(self, req, timeout_s, cancel=None):
        results = [{"tree": torch.arange(4.0), "torch_elements": 0} for _ in req["cases"]]
        if not req.get("guard"):
            return {"results": results, "perf_count": 10, "perf_bytes": [1 << 20] * 10}
        indices = [c["shape"]["perf"] for c in req["cases"]]
        self.guard_requests.append((indices, req["keep"]))
        return {"results": results, "guard": [self.unstable.get(i, {}) for i in indices]}


READ = {"what": "reads memory outside its inputs", "detail": "with NaN or extreme values around its inputs, "
                                                             "output: (float32): 3 of 4 elements outside tolerance"}
WRITE = {"what": "writes outside its inputs", "detail": "8 of the 65536 bytes after it changed around input 0"}


def gpu_refs(pool):
    return ScriptReferences(pool, (0, 1), interpret=False, timeout_s=10, spec=lambda t: {"name": t.name})


def test_a_benchmark_input_whose_result_depends_on_the_bytes_around_it_is_not_timed_and_is_named():
    pool = GuardPool({4: READ, 8: WRITE})
    ref = gpu_refs(pool).get(SimpleNamespace(name="t"))
    checked, keep = pool.guard_requests[0]
    assert not keep and len(pool.guard_requests) == 1  # a full test: the plain results are not sent back
    assert checked == [0, 2, 4, 5, 7, 9, 1, 8]  # the timed inputs, then the held-out ones
    assert not ref.error and ref.timed == (0, 2, 5, 7, 9) and ref.heldout_perf == (1,)
    assert ref.unstable[4].reason.startswith("reads memory outside its inputs (with NaN")
    assert ref.unstable[8].what == "writes outside its inputs"
    assert ref.dropped() == "perf 4, 8 left out (reads memory outside its inputs; writes outside its inputs)"


def test_a_task_with_no_benchmark_input_left_to_time_is_invalid_here_with_the_defect_named():
    unstable = {i: WRITE for i in (0, 2, 4, 5, 7, 9)}
    ref = gpu_refs(GuardPool(unstable)).get(SimpleNamespace(name="t"))
    assert ref.error == ("the suite's reference writes outside its inputs on the benchmark inputs (perf 0): "
                         "8 of the 65536 bytes after it changed around input 0")
    assert sorted(ref.unstable) == [0, 2, 4, 5, 7, 9]
