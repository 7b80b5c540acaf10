"""fitness/common/reference.py: float64 references, computed once per case however many ask at once."""
import dataclasses
import threading
import time

import pytest
import torch

import fitness.common.reference as reference
from fitness.common.reference import ReferenceCache

CASE = {"split": "tuning", "shape": {"M": 4, "N": 8}, "dtype": "float32", "seed": 0}


def test_a_reference_is_float64_and_computed_once_for_many_waiters(builtin, monkeypatch):
    calls, real = [], reference.compute

    def slow(task, case, device="cpu", signatures=None):
        calls.append(task.case_key(case))
        time.sleep(0.3)  # long enough for every thread to be waiting on it
        return real(task, case, device, signatures)
    monkeypatch.setattr(reference, "compute", slow)
    cache, got = ReferenceCache(), []
    threads = [threading.Thread(target=lambda: got.append(cache.get(builtin["softmax"], CASE))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 8
    refs, expected = got[0]
    assert refs[0].dtype == torch.float64 and expected == [("float32", (4, 8), (8, 1))]  # dtype, shape, strides
    assert all(g is got[0] for g in got)


def test_different_cases_are_computed_one_at_a_time(builtin, monkeypatch):
    running, peak, real = [0], [0], reference.compute
    lock = threading.Lock()

    def counted(task, case, device="cpu", signatures=None):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.1)
        with lock:
            running[0] -= 1
        return real(task, case, device, signatures)
    monkeypatch.setattr(reference, "compute", counted)
    cache = ReferenceCache()
    threads = [threading.Thread(target=cache.get, args=(builtin["softmax"], {**CASE, "seed": s})) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1 and len(cache._items) == 4


def test_a_reference_the_device_cannot_compute_is_computed_on_the_cpu(builtin):
    # a reference that fails off the CPU (CPU tensors of its own, out of memory) is computed
    # there instead, from the same inputs
    task = builtin["softmax"]

    def cpu_only(x):
        if x.device.type != "cpu":
            raise RuntimeError("this reference makes CPU tensors of its own")
        return task.reference(x)
    picky = dataclasses.replace(task, reference=cpu_only)
    refs, expected = ReferenceCache(device="meta").get(picky, CASE)
    cpu_refs, cpu_expected = reference.compute(task, CASE, "cpu")
    assert refs[0].device.type == "cpu" and torch.equal(refs[0], cpu_refs[0]) and expected == cpu_expected


def test_the_default_bound_holds_a_gpu_generation_but_not_the_whole_machine():
    n = reference.default_bytes()
    assert 0 < n <= 32 << 30 and ReferenceCache().max_bytes == n


def test_the_outputs_signature_is_found_once_per_shape_and_dtype_whatever_the_seed(builtin, monkeypatch):
    metas, real = [], reference.on_meta
    monkeypatch.setattr(reference, "on_meta", lambda task, args: metas.append(1) or real(task, args))
    cache = ReferenceCache()
    for seed in range(3):
        assert cache.get(builtin["softmax"], {**CASE, "seed": seed})[1] == [("float32", (4, 8), (8, 1))]
    cache.get(builtin["softmax"], {**CASE, "shape": {"M": 3, "N": 8}})  # another shape: found again
    assert len(metas) == 2 and cache.computed == 4


def test_an_output_whose_shape_depends_on_the_data_is_measured_on_every_draw(builtin):
    # no meta kernel for nonzero: the reference runs for real, and its shape is never reused
    task = dataclasses.replace(builtin["softmax"], reference=lambda x: torch.nonzero(x > 0.5))
    cache = ReferenceCache()
    shapes = {cache.get(task, {**CASE, "seed": seed})[1][0][1] for seed in range(6)}
    assert len(shapes) > 1


def test_a_prefetched_reference_is_computed_once_and_a_failing_one_fails_only_when_asked_for(builtin):
    cache = ReferenceCache()
    cache.prefetch(builtin["softmax"], CASE)
    deadline = time.monotonic() + 10
    while cache.computed < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.get(builtin["softmax"], CASE)[0][0].dtype == torch.float64 and cache.computed == 1

    def broken(x):
        raise ValueError("no reference here")
    task = dataclasses.replace(builtin["softmax"], name="broken", reference=broken)
    cache.prefetch(task, CASE)  # the background thread swallows it...
    with pytest.raises(ValueError, match="no reference here"):
        cache.get(task, CASE)  # ...and the comparison that asks meets it
