"""The zygote: a clean process that forks one child per conversation.

Importing torch and Triton takes seconds; a fork takes milliseconds. The zygote imports them,
installs the launch hook, and never touches CUDA (a CUDA context does not survive a fork) nor
any candidate's code. Each request on its control socket carries a socket (and a log file) for
the child's conversation with the engine; the zygote forks, the child confines itself
(fitness.process.isolation), starts the device and serves that conversation, then exits. So nothing a
candidate does outlives its conversation.

Started by fitness.engine.pool as `python -m fitness.process.zygote CONTROL_FD`, inside the sandbox.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from fitness.process.reaper import Pinned

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _serve_child(conn_fd: int, log_fd: int, read_only: tuple[str, ...], clean: bool, state) -> None:
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    keep = sorted({0, 1, 2, conn_fd})
    for lo, hi in zip(keep, keep[1:] + [65536]):
        os.closerange(lo + 1, hi)
    from fitness.process.isolation import confine, set_limits

    how = confine(read_only, keep_cache=clean)
    import ctypes

    # a subreaper: whatever the child starts and orphans (a daemon's double fork) is re-parented
    # here, not to init, so it can be found by ancestry (fitness.process.reaper) and is killed below
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
    pid = os.fork()
    if pid:
        os.close(conn_fd)
        code = _wait_and_reap(pid)
        # the engine cannot wait for a grandchild: the log carries how it ended
        how_ended = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        os.write(2, f"\n[te-exit] {how_ended}\n".encode())
        os._exit(code & 0xFF)
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setsid()
    set_limits(clean)
    from fitness.process.child import Child

    Child(*state).serve(conn_fd, how)


def _wait_and_reap(pid: int) -> int:
    """The child's exit code, once it ended and every process left under this subreaper is
    killed and reaped (the engine sweeps as well: this process may be killed by the candidate)."""
    from fitness.process.reaper import Marker, kill, members, pin, release

    _, status = os.waitpid(pid, 0)
    mine = Marker(None, pin(os.getpid()))
    while True:
        left = members(mine)  # pinned, each proven to descend from this process
        for p in left.values():
            kill(p)
        release(left)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)


def _kill_strays(forked: list[Pinned], me: Pinned) -> list[Pinned]:
    """Kills every process re-parented here (not one this zygote forked, nor below one), each
    pinned and proven a child of this process first; the children it forked that still run."""
    from fitness.process.reaper import is_live, kill, parents, pin

    live: list[Pinned] = []
    for p in forked:
        if is_live(p):
            live.append(p)
        else:
            os.close(p.fd)
    ours = {p.pid for p in live}  # held by live children: no stray can have one of these pids
    for pid, parent in parents().items():
        if parent == me.pid and pid not in ours:
            stray = pin(pid, me)
            if stray is not None:
                kill(stray)
                os.close(stray.fd)
    return live


def _warm_triton() -> None:
    """What every child's first Triton launch would compute again, done once here (none of it
    touches CUDA): H100, a forked child's first launch of a cached kernel took 0.75 s, 0.55 s
    of it hashing Triton's own sources and library for the cache key, 0.17 s importing gluon
    (bench/triton_first_launch.py); two such children per candidate."""
    try:
        from triton.runtime.cache import triton_key

        triton_key()  # lru_cached: the forked children inherit it
        import triton.experimental.gluon  # noqa: F401
    except Exception:  # noqa: BLE001 - another Triton's layout: the children compute it themselves
        pass


def _load_shared() -> tuple:
    """Imports torch, Triton and the suites once and installs the launch hook, for every child
    to share; the state each child's Child is built from."""
    import torch  # noqa: F401 - imported once here, shared by every child
    import torch._dynamo  # noqa: F401 - on import it re-wraps torch functions (manual_seed, ...)
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    _warm_triton()
    import suites.registry  # noqa: F401
    from fitness.candidate.harness import LaunchHook, Snapshot
    from fitness.process.isolation import PRIVATE_MOUNT

    hook = LaunchHook()
    hook.install()
    state = (hook, Snapshot(hook))
    os.makedirs(PRIVATE_MOUNT, exist_ok=True)
    return state


def _become_reaper() -> Pinned:
    """Children reaped by the kernel, this process a subreaper; this process, pinned."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    # a subreaper too: a process whose child's reaper was killed (no user namespace marks it
    # then) lands here, and is killed before the next child is forked
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
    from fitness.process.reaper import pin

    me = pin(os.getpid())
    assert me is not None
    return me


def main() -> None:
    ctl = socket.socket(fileno=int(sys.argv[1]))
    os.dup2(2, 1)  # nothing printed here may reach a channel
    state = _load_shared()
    clean = os.environ.get("TE_CLEAN") == "1"  # its children may write the clean Triton cache
    caches = () if clean else (os.environ.get("TRITON_CACHE_DIR", ""), os.environ.get("TE_SHARED_TRITON_CACHE", ""))
    read_only = tuple(p for p in ("/tmp", *caches) if p)
    me = _become_reaper()
    from fitness.process.reaper import pin

    forked: list[Pinned] = []
    ctl.send(json.dumps({"op": "ready", "pid": os.getpid()}).encode())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 2)
        except OSError:
            return
        if not msg:
            return
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            ctl.send(json.dumps({"error": "a fork request carries two descriptors"}).encode())
            continue
        forked = _kill_strays(forked, me)
        pid = os.fork()
        if pid == 0:
            ctl.close()
            for p in (me, *forked):  # no candidate gets a handle on its siblings
                os.close(p.fd)
            try:
                _serve_child(fds[0], fds[1], read_only, clean, state)
            except BaseException:  # noqa: BLE001 - into the child's log, for the engine's note
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
            finally:
                os._exit(0)
        child = pin(pid, me)  # None: it is gone already (reaped by the kernel)
        if child is not None:
            forked.append(child)
        for fd in fds:
            os.close(fd)
        ctl.send(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    main()
