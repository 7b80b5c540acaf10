"""The engine's side of one forked child: its conversation, its watchdog, and what it left behind.

Separate from fitness.engine.pool, which decides *when* children exist (a zygote per pool, slots, spares):
this module holds what happens to *one* child from its hello to its close: every exchange under a
watchdog (deadline, resident memory), the nonce that tells its replies from frames the candidate
forged, the sweep of every process it started (fitness.process.reaper), and the check of /dev/shm where it
had no mount namespace of its own (_ShmWatch). WorkerFailure lives here since a child raises it;
fitness.engine.pool re-exports it and ChildProcess, where callers import them from.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from typing import IO

from fitness.common.messages import BadMessage, Ready, Request
from fitness.common.replies import Nothing, P, Reply
from fitness.engine.watch import WATCHDOG, Watched
from fitness.process import protocol, reaper

STARTUP_TIMEOUT_S = 180.0
LOG_TAIL = 3000



class WorkerFailure(Exception):
    """The child died or was killed while serving a request; the message says why."""



def _tail(log: IO[bytes]) -> str:
    try:
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - LOG_TAIL))
        return log.read().decode(errors="replace").strip()
    except (OSError, ValueError):
        return ""



class ChildProcess:
    """One forked child and its conversation with the engine."""

    def __init__(self, conn: socket.socket, log: IO[bytes], pid: int, mem_limit: int,
                 zygote: reaper.Pinned | None = None, tainted_shm: set[str] | None = None):
        self.conn, self.log, self.pids, self.mem_limit = conn, log, [pid], mem_limit
        self.ready: Ready | None = None  # its greeting: who it is, before any request
        self.dead = False
        self.zygote = zygote
        # the zygote's direct child, pinned while it is provably the zygote's; until the child
        # said hello it marks the child's processes by their ancestry
        self.reaper = reaper.pin(pid, zygote) if zygote is not None else None
        self.child: reaper.Pinned | None = None
        self.marker = reaper.Marker(None, self.reaper)
        self._reaper_lived = True  # whether the reaper was alive when the child was first killed
        self._shm = _ShmWatch(zygote.pid if zygote else None, set() if tainted_shm is None else tainted_shm)
        self.left_behind = ""  # why the candidate fails for what it left (processes, files)
        self.gpu_peak = 0  # the most its allocator reserved, as its replies said (fitness.engine.gpu_memory)
        self.on_memory: Callable[[int], None] | None = None  # told what it holds after every reply

    def hello(self) -> None:
        if self.reaper is None:
            self.kill()
            raise WorkerFailure(f"the child's reaper (pid {self.pids[0]}) could not be pinned as the zygote's "
                                "child; not used")
        try:
            self.ready = Ready.from_wire(self._exchange(None, STARTUP_TIMEOUT_S, "starting"))
        except BadMessage as e:  # sent before any of a candidate's code runs: the child is broken
            self.kill()
            raise WorkerFailure(f"the child's greeting is malformed ({e}); not used") from None
        self.pids.append(self.ready.pid)
        # read now, before any of the candidate's code runs in the child
        self.child = reaper.pin(self.pids[-1], self.reaper)
        self.marker = reaper.marker_of(self.reaper, self.child, self.zygote.pid if self.zygote else None)
        if self.child is None:
            self.kill()
            raise WorkerFailure("the child's process could not be pinned as its reaper's child; not used")

    def ask(self, req: Request[P], timeout_s: float) -> Reply[P]:
        """The child's reply to `req`, its payload read as the op's (fitness.common.messages); a
        payload of the wrong type fails like a malformed envelope (WorkerFailure, child killed)."""
        reply = Reply.from_wire(self.request(req.to_wire(), timeout_s), req.answer())
        if reply.malformed:
            self.kill()
            raise WorkerFailure(f"{reply.error}; child killed")
        return reply

    def request(self, msg: dict, timeout_s: float) -> dict:
        """The child's raw reply to a wire dict, its envelope checked (a reply whose error, stage,
        fatal, nonce or phase_ms has the wrong type kills the child: WorkerFailure). The engine
        sends through ask(); this stays for it and for tests that send what no record can (an
        unknown op, a malformed request)."""
        if self.dead:
            raise WorkerFailure("the child was already killed")
        # a fresh nonce per request, echoed in the reply: a frame the candidate wrote into the
        # channel itself (a forged or extra reply) cannot pass for the child's answer
        nonce = secrets.token_hex(8)
        raw = self._exchange({**msg, "nonce": nonce}, timeout_s, msg.get("op", "request"))
        reply = Reply.from_wire(raw, Nothing)
        if reply.malformed:
            self.kill()
            raise WorkerFailure(f"{reply.error}; child killed")
        if reply.nonce != nonce:
            self.kill()
            raise WorkerFailure("the child's channel carried a reply to no request (written by the candidate?); "
                                "child killed")
        if reply.fatal:
            self.kill()  # a CUDA fault poisons the context: nothing more from this process
        self.gpu_peak = max(self.gpu_peak, reply.gpu_peak)
        if self.on_memory is not None and reply.gpu_now:
            self.on_memory(reply.gpu_now)
        return raw

    def _exchange(self, msg: dict | None, timeout_s: float, what: str) -> dict:
        watched = Watched(self.pids, time.monotonic() + timeout_s, timeout_s, self.mem_limit, self.kill)
        key = WATCHDOG.add(watched)
        try:
            if msg is not None:
                protocol.send(self.conn.fileno(), msg)
            reply = protocol.recv(self.conn.fileno(), max_bytes=max(8 << 30, self.mem_limit))
        except Exception as e:  # noqa: BLE001 - a reply that does not decode is the child's failure
            WATCHDOG.remove(key)
            note = watched.why[0] if watched.why else self._death_note(what, e)
            self.kill()
            raise WorkerFailure(note) from None
        WATCHDOG.remove(key)
        if watched.why:  # killed as its reply came: the deadline had passed all the same
            raise WorkerFailure(watched.why[0])
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerFailure("child sent a malformed reply")
        return reply

    def _death_note(self, what: str, err: Exception) -> str:
        time.sleep(0.3)  # the intermediate process writes how the child ended into the log
        log = _tail(self.log)
        ended = [ln for ln in log.splitlines() if ln.startswith("[te-exit] ")]
        cause = ended[-1].removeprefix("[te-exit] ") if ended else f"channel closed: {err}"
        rest = "\n".join(ln for ln in log.splitlines() if not ln.startswith("[te-exit] "))
        return f"worker crashed while {what} ({cause}); last output:\n{rest}"

    def kill(self) -> None:
        """The child (its reaper where the child is not known yet), through its pidfd: a pid
        alone may be another process's by now. What it started is swept by close()."""
        if not self.dead:
            self._reaper_lived = reaper.alive(self.reaper)
        self.dead = True
        target = self.child or self.reaper
        if target is not None:
            reaper.kill(target)
        try:
            self.conn.close()
        except OSError:
            pass

    def close(self) -> None:
        held = self._shm.held_by(self.marker, self.child) if self.marker.user_ns is None else set()
        self.kill()
        swept = reaper.sweep(self.marker, spare=frozenset(self.pids[1:]))
        if self.reaper is not None:
            reaper.kill(self.reaper)
        shm = self._shm.note(held) if self.marker.user_ns is None else ""  # else /dev/shm was its own
        self.left_behind = "; ".join(filter(None, (self._leftover_note(swept), shm)))
        self.marker.close()  # closes the reaper's pidfd too
        if self.child is not None:
            os.close(self.child.fd)
            self.child = None
        self.reaper = None
        self.log.close()

    def _leftover_note(self, swept: reaper.Sweep) -> str:
        notes = []
        if swept.killed:
            notes.append(f"started {len(swept.killed)} process(es) that outlived its evaluation "
                         f"(a daemon?): {', '.join(swept.killed[:4])}; killed")
        if swept.left:
            notes.append(f"processes it started could not be killed: {swept.left[:8]}")
        if self.marker.user_ns is None and not self._reaper_lived:
            notes.append("could not verify that every process it started has ended: its child had no user "
                         "namespace to find them by, and the reaper they are re-parented to was killed")
        return "; ".join(notes)


class _ShmWatch:
    """Where a child could not take a mount namespace, its /dev/shm is its sandbox's: a tmpfs of
    this pool's own under bubblewrap, else the machine's. What appeared there during its
    conversation fails it (fail closed: a candidate whose conversation overlapped with the
    writer's fails as well). In the pool's own /dev/shm it is removed (only this pool's
    candidates write there); in the machine's, only what the candidate's own processes held open
    or mapped, and no other process did, is removed: the rest may be another program's (torch's
    shared memory, another run's), so it is left and named in the reason, and every later
    candidate of the pool fails while it is there (it could have been read)."""

    def __init__(self, zygote: int | None, tainted: set[str], root: str | None = None):
        self.root = root or (f"/proc/{zygote}/root/dev/shm" if zygote else "/dev/shm")
        self.tainted = tainted  # the pool's, shared by its children
        self.before = self._entries()
        try:
            self.private = os.stat(self.root).st_dev != os.stat("/dev/shm").st_dev
        except OSError:
            self.private = False

    def _entries(self) -> set[str]:
        try:
            return set(os.listdir(self.root))
        except OSError:
            return set()

    def held_by(self, marker: reaper.Marker, child: reaper.Pinned | None) -> set[str]:
        """Names in /dev/shm that the candidate's processes hold open or mapped (read before
        they are killed), and that no other readable process holds."""
        if self.private:
            return set()
        found = reaper.members(marker)
        ours = {p.pid: p for p in ([child] if child else [])} | found
        held: set[str] = set()
        for pid, p in ours.items():
            names = _shm_names(pid)
            if reaper.is_live(p):  # what was read is that process's
                held |= names
        reaper.release(found)
        if held:
            held -= set().union(*(_shm_names(int(n)) for n in os.listdir("/proc")
                                  if n.isdigit() and int(n) not in ours))
        return held

    def note(self, held: set[str]) -> str:
        """Removes what appeared since the fork and is provably the candidate's; says what."""
        now = self._entries()
        self.tainted &= now  # gone since: no longer a channel
        # a child forked ahead of need (a spare) may predate what an earlier candidate left: the
        # pool's record, not the fork's listing, says who left it (seen on the H200)
        seen = sorted(self.tainted & now)
        new = sorted(now - self.before - self.tainted)
        stale = (f"/dev/shm, shared with the machine, held {', '.join(seen[:4])} during its evaluation, left by "
                 "an earlier candidate and not removable (could have been read)") if seen else ""
        if not new:
            return stale
        gone = [n for n in new if (self.private or n in held) and _remove(os.path.join(self.root, n))]
        left = [n for n in new if n not in gone]
        where = "this pool's candidates" if self.private else "the whole machine"
        note = (f"/dev/shm gained {', '.join(new[:4])} during its evaluation, shared with {where} (no "
                "mount namespace of its own)")
        if gone:
            note += f"; removed {', '.join(gone[:4])} (its own)"
        if left:
            note += f"; left {', '.join(left[:4])} in place (not provably its own)"
            self.tainted.update(left)
        return "; ".join(filter(None, (note, stale)))


def _shm_names(pid: int) -> set[str]:
    """Names under /dev/shm that `pid` has open (/proc/PID/fd) or mapped (/proc/PID/maps)."""
    paths: set[str] = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                paths.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
        with open(f"/proc/{pid}/maps") as f:
            paths |= {ln.split(None, 5)[5].strip() for ln in f if "/dev/shm/" in ln}
    except (OSError, IndexError):
        pass
    return {p.removeprefix("/dev/shm/").removesuffix(" (deleted)").split("/")[0]
            for p in paths if p.startswith("/dev/shm/")}


def _remove(path: str) -> bool:
    try:
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        return True
    except OSError:
        return False
