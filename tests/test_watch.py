"""fitness/engine/watch.py: the one watchdog over every exchange with a child, on real processes."""
import subprocess
import sys
import time

from fitness.engine.watch import POLL_S, Watchdog, Watched


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _wait_dead(proc: subprocess.Popen) -> int:
    return proc.wait(timeout=10)


def test_a_child_past_its_deadline_is_killed_with_the_reason_and_one_in_time_is_not():
    dog = Watchdog()
    late, fine = _sleeper(), _sleeper()
    try:
        w_late = Watched([late.pid], time.monotonic() + 0.2, 0.2, 0, late.kill)
        w_fine = Watched([fine.pid], time.monotonic() + 60, 60, 0, fine.kill)
        dog.add(w_late)
        key = dog.add(w_fine)
        assert _wait_dead(late) != 0 and "timed out after 0 s" in w_late.why[0]
        dog.remove(key)  # its reply came: it is never killed for this exchange
        time.sleep(3 * POLL_S)
        assert fine.poll() is None and not w_fine.why
    finally:
        for p in (late, fine):
            p.kill()
            p.wait()


def test_a_child_over_its_memory_limit_is_killed_and_told_how_much_it_used():
    dog = Watchdog()
    proc = _sleeper()
    try:
        w = Watched([proc.pid], time.monotonic() + 60, 60, 1 << 20, proc.kill)  # 1 MiB: a python is over it
        dog.add(w)
        assert _wait_dead(proc) != 0
        assert "GiB of host memory, over the 0.0 GiB limit" in w.why[0]
    finally:
        proc.kill()
        proc.wait()
