"""fitness/process/zygote.py: what the zygote does between forks (strays killed, a child's leftovers
reaped) and how it answers its control socket. Forking and serving real candidates is
tests/test_pool.py's; the helpers run here in a process of their own, a subreaper as the zygote is."""
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# the zygote's loop between forks: two children it forked (one already gone) and one orphan
# re-parented to it (a daemon whose parent exited)
KILL_STRAYS = """
import json, os, signal, time
from fitness.process.reaper import pin, stat_of
from fitness.process.zygote import _become_reaper, _kill_strays

def sleeper():
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    return pid

def gone(pid):
    for _ in range(300):
        st = stat_of(pid)
        if st is None or st[0] in (b"Z", b"X"):
            return True
        time.sleep(0.01)
    return False

me = _become_reaper()
kept, ended = sleeper(), sleeper()
r, w = os.pipe()
if os.fork() == 0:  # a daemon's double fork: its grandchild is re-parented to this subreaper
    g = os.fork()
    if g == 0:
        time.sleep(60)
        os._exit(0)
    os.write(w, str(g).encode())
    os._exit(0)
stray = int(os.read(r, 32))
while stat_of(stray)[1] != os.getpid():
    time.sleep(0.01)
forked = [pin(kept, me), pin(ended, me)]
ended_fd = forked[1].fd
os.kill(ended, 9)
assert gone(ended)
live = _kill_strays(forked, me)
try:
    os.fstat(ended_fd)
    ended_fd_open = True
except OSError:
    ended_fd_open = False
print(json.dumps({"live": [p.pid for p in live], "kept": kept, "kept_alive": stat_of(kept)[0] not in (b"Z", b"X"),
                  "stray_gone": gone(stray), "ended_fd_open": ended_fd_open,
                  "sigchld_ignored": signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN}))
os.kill(kept, 9)
"""

# what the process between the zygote and a child does once the child ends: its exit code, and
# nothing the child left behind (a daemon) still running
WAIT_AND_REAP = """
import ctypes, json, os, signal, sys, time
from fitness.process.reaper import stat_of
from fitness.process.zygote import PR_SET_CHILD_SUBREAPER, _wait_and_reap

ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
how = sys.argv[1]
r, w = os.pipe()
child = os.fork()
if child == 0:
    g = os.fork()
    if g == 0:
        os.setsid()
        time.sleep(60)
        os._exit(0)
    os.write(w, str(g).encode())
    if how == "signal":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    os._exit(3)
daemon = int(os.read(r, 32))
code = _wait_and_reap(child)
st = stat_of(daemon)
print(json.dumps({"code": code, "daemon_left": st is not None and st[0] not in (b"Z", b"X")}))
"""


def run_script(source: str, *args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(source), *args], capture_output=True, text=True,
                       timeout=30, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_before_a_fork_the_zygote_kills_orphans_re_parented_to_it_and_forgets_its_children_that_ended():
    out = run_script(KILL_STRAYS)
    assert out["stray_gone"], "an orphan re-parented to the zygote was left running"
    assert out["live"] == [out["kept"]] and out["kept_alive"], "a child the zygote forked was killed or dropped"
    assert not out["ended_fd_open"], "the pidfd of a child that ended was kept open"
    assert out["sigchld_ignored"]  # its children are reaped by the kernel


@pytest.mark.parametrize("how, code", [("exit", 3), ("signal", -15)])
def test_a_childs_reaper_returns_its_exit_status_only_once_what_it_left_running_is_gone(how, code):
    out = run_script(WAIT_AND_REAP, how)
    assert out == {"code": code, "daemon_left": False}


@pytest.mark.slow
def test_the_zygote_refuses_a_fork_request_without_its_two_descriptors_and_exits_when_its_socket_closes():
    """Started as fitness.engine.pool starts it; a request it refuses leaves it forking."""
    from fitness.engine.pool import Zygote
    from fitness.engine.sandbox import detect

    z = Zygote(detect(True), True, 4 << 30)
    try:
        ctl = z._start()
        assert isinstance(z.pid, int) and z.pinned is not None and z.pinned.pid == z.pid
        ctl.settimeout(30)
        r, w = os.pipe()
        try:
            socket.send_fds(ctl, [b"fork"], [r])  # one descriptor, not two
        finally:
            os.close(r)
            os.close(w)
        assert json.loads(ctl.recv(1 << 16)) == {"error": "a fork request carries two descriptors"}
        ctl.send(b"fork")  # none at all
        assert json.loads(ctl.recv(1 << 16)) == {"error": "a fork request carries two descriptors"}
        child = z.fork()  # still serving: a real fork, a child that says hello
        try:
            assert child.pids[-1] != z.pid
        finally:
            child.close()
        assert z.proc is not None
        proc = z.proc
        ctl.shutdown(socket.SHUT_RDWR)  # the engine gone: the zygote returns from its loop
        assert proc.wait(timeout=30) == 0
    finally:
        z.shutdown()
