"""Admission by GPU memory (fitness.engine.gpu_memory, issue 48): the ledger on real threads, and a
real pool whose children hold their role's need while they live."""
from __future__ import annotations

import threading
import time

import pytest

from fitness.engine.gpu_memory import CONTEXT_BYTES, DEFAULT_NEED, ChildRole, GpuMemory, out_of_memory
from fitness.engine.pool import Cancelled, WorkerPool
from fitness.engine.sandbox import detect, worker_env

GIB = 1 << 30


def _hold(memory: GpuMemory, role: str, release: threading.Event, entered: threading.Event) -> threading.Thread:
    def run() -> None:
        with memory.admit(role):
            entered.set()
            release.wait(10)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _admitted_within(memory: GpuMemory, role: str, seconds: float) -> bool:
    got = threading.Event()
    release = threading.Event()
    _hold(memory, role, release, got)
    ok = got.wait(seconds)
    release.set()
    return ok


def test_a_child_waits_until_the_reservations_leave_room_for_its_roles_need():
    memory = GpuMemory(int(5 * GIB / 0.92) + 1)  # a budget of five GiB: two default needs fit, not three
    release, first, second = threading.Event(), threading.Event(), threading.Event()
    _hold(memory, "candidate", release, first)
    _hold(memory, "clean", release, second)
    assert first.wait(2) and second.wait(2)
    assert not _admitted_within(memory, "candidate", 0.5)
    release.set()
    assert _admitted_within(memory, "candidate", 2)
    assert memory.most_held == 2 * DEFAULT_NEED


def test_a_roles_need_is_the_largest_peak_its_recent_children_reported_plus_the_context():
    memory = GpuMemory(80 * GIB)
    assert memory.need("clean") == DEFAULT_NEED
    memory.learn("clean", 3 * GIB)
    memory.learn("clean", 1 * GIB)
    memory.learn("clean", 0)  # a child that never started its device says nothing
    assert memory.need("clean") == 3 * GIB + CONTEXT_BYTES
    assert memory.need("candidate") == DEFAULT_NEED


def test_one_child_always_runs_even_when_its_need_exceeds_the_budget():
    memory = GpuMemory(GIB)
    memory.learn("candidate", 10 * GIB)
    assert _admitted_within(memory, "candidate", 1)


def test_memory_the_driver_reports_in_use_outside_the_ledger_holds_children_back():
    used = [75 * GIB]  # a process outside this evaluator (or a candidate beyond its reservation)
    memory = GpuMemory(80 * GIB, lambda: used[0])
    release, first = threading.Event(), threading.Event()
    _hold(memory, "candidate", release, first)
    assert first.wait(2)  # the first always runs
    assert not _admitted_within(memory, "clean", 0.5)
    used[0] = 10 * GIB
    assert _admitted_within(memory, "clean", 2)
    release.set()


def test_running_alone_waits_for_transient_children_and_admits_none_meanwhile_but_its_own():
    memory = GpuMemory(80 * GIB)
    release, first, base, base_release = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    _hold(memory, "baseline", base_release, base)  # the turn's baseline child lives on: it does not block
    _hold(memory, "candidate", release, first)
    assert first.wait(2) and base.wait(2)
    order: list[str] = []

    def alone() -> None:
        with memory.alone():
            order.append("alone")
            with memory.admit("clean"):  # the stage's own child
                order.append("own child")
            time.sleep(0.3)
        order.append("alone done")
    t = threading.Thread(target=alone, daemon=True)
    t.start()
    time.sleep(0.3)
    assert order == []  # the candidate's child still holds memory
    late = threading.Event()
    _hold(memory, "candidate", threading.Event(), late)
    release.set()
    t.join(5)
    assert order == ["alone", "own child", "alone done"]
    assert late.wait(2)  # admitted once the stage ran alone
    assert memory.alone_runs == 1
    base_release.set()


def test_a_stage_that_ran_out_of_gpu_memory_is_run_again_alone_once():
    memory = GpuMemory(80 * GIB)
    reasons = iter(["replay: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", ""])
    runs: list[int] = []

    def stage() -> str:
        runs.append(memory._alone is not None)
        return next(reasons)
    assert memory.retried(stage, lambda r: (r,)) == ""
    assert runs == [False, True]
    assert memory.retried(lambda: "wrong result", lambda r: (r,)) == "wrong result"  # any other failure: once
    assert memory.alone_runs == 1


def test_out_of_memory_is_the_devices_memory_not_a_kernels_shared_memory():
    assert out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")
    assert out_of_memory("RuntimeError: CUDA driver error: CUDA_ERROR_OUT_OF_MEMORY")
    assert not out_of_memory("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144")
    assert not out_of_memory(None)


def test_a_waiting_child_stops_when_its_run_is_cancelled():
    memory = GpuMemory(GIB)
    release, first = threading.Event(), threading.Event()
    _hold(memory, "candidate", release, first)
    assert first.wait(2)

    def cancelled() -> None:
        raise Cancelled()
    with pytest.raises(Cancelled):
        with memory.admit("clean", cancelled):
            pass
    release.set()


def test_a_candidates_process_has_an_allocator_cap_and_a_clean_one_the_default():
    assert worker_env(False, 4 << 30)["TE_GPU_MEM_FRACTION"] == "0.5"
    assert worker_env(False, 4 << 30, clean=True)["TE_GPU_MEM_FRACTION"] == "0.8"


def test_a_pools_children_hold_their_roles_need_while_they_live():
    memory = GpuMemory(80 * GIB)
    pool = WorkerPool(1, detect(True), True, 4 << 30, role=ChildRole("clean", memory))
    try:
        with pool.child() as child:
            assert not child.dead
            assert [role for role, _ in memory._held.values()] == ["clean"]
        assert memory._held == {}
    finally:
        pool.close()


def test_a_child_waiting_for_memory_gives_its_slot_to_the_stage_running_alone():
    memory = GpuMemory(80 * GIB)
    pool = WorkerPool(1, detect(True), True, 4 << 30, role=ChildRole("clean", memory))
    done: list[str] = []
    try:
        with memory.alone():
            def wait() -> None:
                with pool.child():
                    done.append("waiter")
            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()  # takes the one slot, is refused memory, gives the slot back and waits
            time.sleep(0.5)
            with pool.child() as child:  # the stage's own child: the slot, and admitted
                done.append("alone" if not child.dead else "dead")
        waiter.join(10)
        assert done == ["alone", "waiter"]
    finally:
        pool.close()


def test_a_living_childs_reservation_follows_what_it_holds():
    memory = GpuMemory(80 * GIB)
    base, clean = memory.try_admit("baseline"), memory.try_admit("clean")
    assert base is not None and clean is not None
    memory.observe(base, 9 * GIB)  # a long-lived baseline child's prepared inputs
    memory.observe(clean, 5 * GIB)
    assert memory.most_held == 14 * GIB + 2 * CONTEXT_BYTES
    memory.observe(base, 1 * GIB)  # given back while idle: a persistent child's reservation follows it down
    memory.observe(clean, 0)  # a transient child's never drops below its role's need
    assert sorted(n for _, n in memory._held.values()) == [GIB + CONTEXT_BYTES, 5 * GIB + CONTEXT_BYTES]
    memory.release(base)
    memory.release(clean)
    memory.set_aside(70 * GIB)  # spare children's contexts: room only for one child at a time
    release, first = threading.Event(), threading.Event()
    _hold(memory, "candidate", release, first)
    assert first.wait(2) and not _admitted_within(memory, "clean", 0.5)
    release.set()


def test_a_candidates_report_is_bounded_by_its_cap():
    memory = GpuMemory(80 * GIB)
    memory.learn("candidate", 10**15)  # a candidate's process reports its own peak: a lie stops at its cap
    assert memory.need("candidate") == 40 * GIB + CONTEXT_BYTES
    ticket = memory.try_admit("clean")
    assert ticket is not None
    memory.observe(ticket, 10**15)
    assert memory.most_held == 80 * GIB + CONTEXT_BYTES
    memory.release(ticket)
