"""Worker processes: crashes, hangs and memory hogs fail one request, and the pool goes on.

These send sources straight to workers, past the static gate, to exercise the process-level
defenses on their own."""
import pytest

from fitness.pool import WorkerFailure, WorkerPool
from fitness.sandbox import detect

TASK = {"suite": "builtin", "name": "softmax", "path": None}
CASE = {"split": "tuning", "shape": {"M": 4, "N": 8}, "dtype": "float32", "seed": 0}


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(1, detect(), interpret=True, mem_limit_bytes=4 << 30, recycle_every=3)
    yield p
    p.close()


def ask(pool, source, timeout=20):
    return pool.request({"op": "correctness", "source": source, "task": TASK, "cases": [CASE]}, timeout)


def good(pool):
    from suites.builtin.common import start_source

    reply = ask(pool, start_source("softmax"))
    assert reply["stage"] == "call" and len(reply["results"]) == 1, reply


def test_abort_is_reported_and_worker_replaced(pool):
    with pytest.raises(WorkerFailure, match="SIGABRT"):
        ask(pool, "import os\nos.abort()\n")
    good(pool)


def test_hang_is_killed_on_deadline(pool):
    with pytest.raises(WorkerFailure, match="timed out"):
        ask(pool, "while True:\n    pass\n", timeout=3)
    good(pool)


def test_rss_watchdog_kills_a_memory_hog():
    p = WorkerPool(1, detect(), interpret=True, mem_limit_bytes=3 << 30, recycle_every=10)
    try:
        # a list of small chunks dodges one big failing malloc, so only the watchdog can stop it
        hog = "import torch\nchunks = [torch.ones(1 << 24) for _ in range(2000)]\n"
        with pytest.raises(WorkerFailure, match="host memory"):
            ask(p, hog, timeout=60)
    finally:
        p.close()


def test_worker_recycled_after_n_requests(pool):
    pids = set()
    for _ in range(7):
        good(pool)
        pids.add(pool.workers[0].info["pid"])
    assert len(pids) >= 2


def test_import_error_is_a_failed_stage_not_a_crash(pool):
    reply = ask(pool, "raise ValueError('nope')\n")
    assert reply["stage"] == "parse" and "nope" in reply["error"]


def test_a_task_goes_back_to_the_worker_that_last_served_it():
    """Its input cache holds that task's inputs. Plain first-free order would alternate here."""
    from suites.builtin.common import start_source

    p = WorkerPool(2, detect(), interpret=True, mem_limit_bytes=4 << 30, recycle_every=50)
    row_sum = {"suite": "builtin", "name": "row_sum", "path": None}
    try:
        for task in (TASK, row_sum, TASK, TASK):
            reply = p.request({"op": "correctness", "source": start_source(task["name"]), "task": task,
                               "cases": [CASE]}, 60)
            assert reply["stage"] == "call", reply
        assert sorted(w.served for w in p.workers) == [1, 3]
    finally:
        p.close()


def test_a_caller_waiting_for_a_busy_pool_can_give_up(pool):
    import threading
    import time

    from fitness.pool import Cancelled

    busy = threading.Thread(target=lambda: ask(pool, "import time\ntime.sleep(4)\n", timeout=20))
    busy.start()
    time.sleep(0.5)  # the one worker is now serving the sleeper
    t0, gave_up = time.monotonic(), threading.Event()
    threading.Timer(0.5, gave_up.set).start()
    with pytest.raises(Cancelled):
        pool.request({"op": "correctness", "source": "x = 1\n", "task": TASK, "cases": [CASE]}, 20, gave_up.is_set)
    assert time.monotonic() - t0 < 2.5  # gave up while the sleeper still held the worker
    busy.join()
    good(pool)  # the request in flight ran to its end and the worker is free again


@pytest.mark.skipif(not detect().isolated, reason="the parent-death signal comes from bubblewrap")
def test_a_worker_started_from_a_short_lived_thread_outlives_it():
    import threading
    import time

    p = WorkerPool(1, detect(), interpret=True, mem_limit_bytes=4 << 30, recycle_every=100)
    try:
        t = threading.Thread(target=good, args=(p,))
        t.start()
        t.join()
        pid = p.workers[0].info["pid"]
        time.sleep(1)  # a parent-death signal tied to that thread would have killed the worker by now
        assert p.workers[0].alive
        good(p)
        assert p.workers[0].info["pid"] == pid and p.restarts == 0
    finally:
        p.close()


def test_a_reply_the_candidate_forged_is_refused_and_the_worker_replaced(pool):
    # written into the reply channel at import, before the worker's own answer
    forged = ("import sys\nfrom fitness import protocol\n"
              "protocol.send(int(sys.argv[-1]), {'stage': 'call', 'results': [{'outputs': []}]})\n")
    with pytest.raises(WorkerFailure, match="reply to no request"):
        ask(pool, forged)
    good(pool)  # a fresh worker: the worker's own late answer is not taken for this request's


def test_a_reply_that_does_not_decode_fails_the_request_not_the_engine(pool):
    garbage = ("import json, os, struct, sys\n"
               "head = json.dumps({'body': {'__dtype__': 'not_a_dtype'}, 'blobs': []}).encode()\n"
               "os.write(int(sys.argv[-1]), struct.pack('<Q', len(head)) + head)\n")
    with pytest.raises(WorkerFailure):
        ask(pool, garbage)
    good(pool)


def test_a_candidates_module_is_gone_before_the_next_request(pool):
    good(pool)  # a candidate module was imported for this
    probe = ("import sys\n"
             "left = [m for m in sys.modules if m.startswith('candidate_') and m != __name__]\n"
             "assert not left, f'still loaded: {left}'\n")
    reply = ask(pool, probe)
    assert "still loaded" not in reply.get("error", ""), reply
    assert "no callable" in reply.get("error", "")  # it imported, then had no entry point


def test_waiting_callers_are_served_in_order_not_as_they_happen_to_wake(pool):
    """With the one worker busy, callers that arrive in the order 3, 1, 2 are served 1, 2, 3;
    they wait with a cancel check, whose periodic wake-ups used to let any of them go first."""
    import threading
    import time

    busy = threading.Thread(target=lambda: ask(pool, "import time\ntime.sleep(2)\n", timeout=20))
    busy.start()
    time.sleep(0.5)
    served, lock = [], threading.Lock()

    def caller(order):
        pool.request({"op": "correctness", "source": "x = 1\n", "task": TASK, "cases": [CASE]}, 20,
                     lambda: False, order)
        with lock:
            served.append(order)
    base = time.monotonic()
    threads = []
    for order in (3, 1, 2):
        threads.append(threading.Thread(target=caller, args=(base + order,)))
        threads[-1].start()
        time.sleep(0.3)  # each is waiting before the next arrives
    for t in [busy, *threads]:
        t.join()
    assert [round(o - base) for o in served] == [1, 2, 3]
    good(pool)
