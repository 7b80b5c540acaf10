"""One watchdog for every exchange with a child: it kills a child past its deadline or over its
memory limit, and says why.

A thread per exchange cost the measuring turn its round trips: starting it and joining it are
two more hand-offs of the engine's GIL per request, and under a search's load each waited for
other threads' switch interval (H100 TritonBench search: the turn's trial requests took 105 s,
the children handled them in 33 s). One thread polls every exchange instead.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

POLL_S = 0.1


@dataclass
class Watched:
    """An exchange under watch; `why` gets the reason its child was killed, if it was."""

    pids: list[int]  # the last one's resident memory is checked
    deadline: float
    timeout_s: float
    mem_limit: int
    kill: Callable[[], None]
    why: list[str] = field(default_factory=list)


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, Watched] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, w: Watched) -> int:
        with self._lock:
            key = next(self._ids)
            self._watched[key] = w
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="child-watchdog")
                self._thread.start()
            return key

    def remove(self, key: int) -> None:
        """Done with: after this its child is never killed for this exchange."""
        with self._lock:
            self._watched.pop(key, None)

    def _run(self) -> None:
        while True:
            time.sleep(POLL_S)
            with self._lock:
                watched = list(self._watched.items())
            # /proc read outside the lock: every request's remove() takes it on the turn's round trip
            found = [(key, w, why) for key, w in watched if (why := _verdict(w))]
            with self._lock:
                for key, w, why in found:
                    if self._watched.pop(key, None) is not None:  # a removed exchange is never killed
                        w.why.append(why)
                        w.kill()


def _verdict(w: Watched) -> str:
    if time.monotonic() > w.deadline:
        return f"timed out after {w.timeout_s:.0f} s (hang or infinite loop); worker killed"
    rss = rss_bytes(w.pids[-1])
    if w.mem_limit and rss > w.mem_limit:
        return (f"used {rss / 2**30:.1f} GiB of host memory, over the "
                f"{w.mem_limit / 2**30:.1f} GiB limit; worker killed")
    return ""


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


WATCHDOG = Watchdog()  # lives as long as the engine
