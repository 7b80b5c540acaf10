"""fitness/engine/pool.py + fitness/process/zygote.py: a fresh child per conversation, watched from outside.
The candidates here go straight to a child (no static gate), as one that slipped past it would."""
import os
import time

import pytest

from fitness.engine.gpu_memory import ChildRole
from fitness.engine.pool import WorkerFailure, WorkerPool
from fitness.engine.sandbox import detect

SPEC = {"suite": "builtin", "name": "softmax", "path": None}


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(2, detect(True), True, 4 << 30)
    yield p
    p.close()


def _import(pool, source, timeout=60.0):
    with pool.child() as child:
        return child.request({"op": "import", "source": source, "task": SPEC}, timeout)


@pytest.mark.slow
def test_a_hang_in_a_c_call_is_killed_on_deadline(pool):
    with pytest.raises(WorkerFailure, match="timed out"):
        _import(pool, "import time\ntime.sleep(600)\n", timeout=3)


@pytest.mark.slow
def test_a_fork_bomb_is_killed_with_its_process_group_and_the_pool_goes_on(pool):
    src = "import os\nfor _ in range(6):\n    os.fork()\nimport time\ntime.sleep(600)\n"
    with pytest.raises(WorkerFailure, match="timed out"):
        _import(pool, src, timeout=3)
    time.sleep(0.5)
    assert "error" not in _import(pool, "def softmax(x):\n    return x\n")


def test_a_flood_of_output_fails_that_candidate_only(pool):
    src = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    reply = _import(pool, src, timeout=60)  # its log is capped (RLIMIT_FSIZE): the write fails
    assert "File too large" in reply["error"]
    assert "error" not in _import(pool, "def softmax(x):\n    return x\n")


def test_a_candidate_that_closes_its_channel_fails_with_a_reason(pool):
    src = "import os\nfor fd in range(3, 200):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n"
    with pytest.raises(WorkerFailure, match="crashed|closed"):
        _import(pool, src)
    assert "error" not in _import(pool, "def softmax(x):\n    return x\n")


def test_exhausting_file_descriptors_hurts_only_the_candidate(pool):
    src = "import os\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n" \
          "except OSError:\n    pass\ndef softmax(x):\n    return x\n"
    reply = _import(pool, src)
    assert reply.get("stage") in ("call", "parse")
    assert "error" not in _import(pool, "def softmax(x):\n    return x\n")


def test_a_reply_the_candidate_forged_is_refused(pool):
    forged = ("import sys\nfrom fitness.process import protocol\n"
              "for fd in range(3, 64):\n    try:\n        protocol.send(fd, {'stage': 'call', 'nonce': 'x'})\n"
              "    except OSError:\n        pass\n")
    with pytest.raises(WorkerFailure):
        _import(pool, forged)


def test_what_a_child_writes_to_tmp_is_gone_for_the_next_child(pool):
    marker = "te_marker_file"
    src = f"import tempfile, os\nopen(os.path.join(tempfile.gettempdir(), {marker!r}), 'w').write('x')\n" \
          "def softmax(x):\n    return x\n"
    assert "error" not in _import(pool, src)
    check = f"import tempfile, os\nassert not os.path.exists(os.path.join(tempfile.gettempdir(), {marker!r}))\n" \
            "def softmax(x):\n    return x\n"
    assert "error" not in _import(pool, check)
    assert not os.path.exists(os.path.join("/tmp", marker))


@pytest.mark.slow
def test_a_candidate_child_reads_the_shared_triton_cache_and_writes_only_its_own(tmp_path):
    """Launchers built by clean children are found; what a candidate builds, or writes on
    purpose, never lands in the shared cache."""
    from triton.runtime.cache import _base32

    from fitness.engine.sandbox import clean_cache_dir

    cache = tmp_path / "cache"
    shared = clean_cache_dir(str(cache))  # what the clean children write
    (shared / _base32("ab12")).mkdir(parents=True)
    (shared / _base32("ab12") / "entry.txt").write_text("built by a clean child")
    src = ("import os\nfrom triton.runtime.cache import get_cache_manager\n"
           "m = get_cache_manager('ab12')\n"
           "assert open(m.get_file('entry.txt')).read() == 'built by a clean child'\n"
           "m.put(b'mine', 'new.bin')\nassert open(m.get_file('new.bin'), 'rb').read() == b'mine'\n"
           "try:\n    open(os.path.join(os.environ['TE_SHARED_TRITON_CACHE'], 'planted'), 'w').write('x')\n"
           "    PLANTED = True\nexcept OSError:\n    PLANTED = False\n"
           "assert not PLANTED or 'TE_STRICT' not in os.environ\n"
           "def softmax(x):\n    return x\n")
    p = WorkerPool(1, detect(True), True, 4 << 30, str(cache))
    try:
        with p.child() as child:
            strict = child.ready is not None and child.ready.how.startswith("own user")
            reply = child.request({"op": "import", "task": SPEC,
                                   "source": src.replace("'TE_STRICT' not in os.environ", str(not strict))}, 60)
    finally:
        p.close()
    assert "error" not in reply, reply
    left = sorted(f.name for f in (shared / _base32("ab12")).iterdir())
    assert left == ["entry.txt"] if strict else "new.bin" not in left


@pytest.mark.slow
def test_a_spare_child_is_started_ahead_and_still_serves_one_conversation_only():
    p = WorkerPool(1, detect(True), True, 4 << 30, spares=1)
    try:
        with p.child() as first:  # no spare yet: forked on demand; the filler starts now
            first_pid = first.pids[-1]
        deadline = time.monotonic() + 60
        while not p._spare and time.monotonic() < deadline:
            time.sleep(0.1)
        spare = p._spare[0]
        with p.child() as second:
            assert second is spare and second.pids[-1] != first_pid
            assert "error" not in second.request({"op": "import", "source": "def softmax(x):\n    return x\n",
                                                  "task": SPEC}, 60)
        assert spare.dead  # killed after its one conversation, like any child
    finally:
        p.close()
    assert not p._spare and p.zygote.proc is None


@pytest.mark.slow
def test_a_candidates_child_runs_at_a_lower_priority_than_a_timing_child():
    from fitness.process.isolation import CANDIDATE_NICE
    base = os.nice(0)
    pools = {clean: WorkerPool(1, detect(True), True, 4 << 30, role=ChildRole("clean" if clean else "candidate"))
             for clean in (False, True)}
    try:
        seen = {}
        for clean, p in pools.items():
            with p.child() as c:
                seen[clean] = c.request({"op": "warm"}, 60)["nice"]
    finally:
        for p in pools.values():
            p.close()
    assert seen == {False: min(19, base + CANDIDATE_NICE), True: base}


def test_a_child_inherits_tritons_cache_key_from_the_zygote_instead_of_hashing_triton_again(pool):
    src = "from triton.runtime.cache import triton_key\nassert triton_key.cache_info().currsize == 1\n" \
          "def softmax(x):\n    return x\n"
    assert "error" not in _import(pool, src)
