"""fitness/process/reaper.py: a sweep kills only what it proves to be the candidate's (pids are reused
within seconds here: pid_max 32768), and everything that is."""
import os
import subprocess
import sys
import time

import pytest

from fitness.process import reaper

pytestmark = pytest.mark.slow  # starts subprocesses

# a subreaper with a daemon under it: its child forks, the grandchild calls setsid and sleeps
SUBREAPER = """
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(36, 1)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '60'])
    os._exit(0)
print('ready', flush=True)
time.sleep(60)
"""


def _spawn(source: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _children(pid: int) -> list[int]:
    time.sleep(0.1)  # the daemon's own parent has exited: it is re-parented by now
    return [p for p, parent in reaper.parents().items() if parent == pid and _alive(p)]


def _alive(pid: int) -> bool:
    st = reaper.stat_of(pid)
    return st is not None and st[0] not in (b"Z", b"X")


@pytest.fixture
def unrelated():
    """A live process of ours with a child: what a reused pid would belong to."""
    proc = _spawn(SUBREAPER)
    kids = _children(proc.pid)
    assert len(kids) == 1
    yield proc, kids[0]
    proc.kill()
    proc.wait()
    for kid in kids:
        try:
            os.kill(kid, 9)
        except OSError:
            pass


def test_a_marker_whose_reaper_pid_now_has_another_start_time_kills_nothing(unrelated):
    proc, kid = unrelated
    live = reaper.pin(proc.pid)
    assert live is not None
    stale = reaper.Pinned(proc.pid, live.fd, live.start + 1)  # the pid, once another process's
    swept = reaper.sweep(reaper.Marker(None, stale), limit_s=1)
    assert swept.killed == [] and _alive(kid) and _alive(proc.pid)
    os.close(live.fd)


def test_a_marker_whose_reaper_was_reaped_kills_nothing_though_its_pid_is_alive(unrelated):
    proc, kid = unrelated
    gone = subprocess.Popen(["true"])
    gone_pin = reaper.pin(gone.pid)
    gone.wait()
    assert gone_pin is not None and not reaper.unreaped(gone_pin.fd)
    start = reaper.stat_of(proc.pid)[2]
    # what a pid reused by `proc` looks like: the number and start time are proc's, the pidfd the
    # reaper's that is gone
    swept = reaper.sweep(reaper.Marker(None, reaper.Pinned(proc.pid, gone_pin.fd, start)), limit_s=1)
    assert swept.killed == [] and _alive(kid) and _alive(proc.pid)
    os.close(gone_pin.fd)


def test_a_daemon_under_a_live_reaper_is_killed_and_the_reaper_spared(unrelated):
    proc, kid = unrelated
    marker = reaper.Marker(None, reaper.pin(proc.pid, reaper.pin(os.getpid())))
    assert marker.reaper is not None
    swept = reaper.sweep(marker, limit_s=2)
    assert [f"{kid} (sleep 60)"] == swept.killed and swept.left == []
    time.sleep(0.1)
    assert not _alive(kid) and _alive(proc.pid)
    marker.close()


def test_pin_refuses_a_process_that_is_not_the_named_parents_child(unrelated):
    proc, kid = unrelated
    me = reaper.pin(os.getpid())
    assert me is not None and reaper.pin(kid, me) is None  # kid's parent is proc, not us
    os.close(me.fd)
