"""Where a run.py command's time goes, request by request: every exchange between the engine and
one of its children (correctness workers, reference and timing children, the baseline child),
with its start, its length, the child's pid, the request's op and shape, and the phases the child
reported (`phase_ms`), written as each one ends. Then run.py goes on as usual.

    python bench/request_trace.py [--log FILE] [--min-s 0.2] -- validate --suite tritonbench ...

Everything after `--` is run.py's command line. Requests shorter than --min-s are counted, not
listed; the totals per op come at the end (also after Ctrl-C or SIGTERM). Not a test: quote its
output.
"""
from __future__ import annotations

import argparse
import atexit
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import run  # noqa: E402
from fitness.engine import pool  # noqa: E402

T0 = time.monotonic()
TOTALS: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
LOCK = threading.Lock()


def describe(msg: dict | None) -> str:
    """The request in a few words: its op and what sizes it."""
    if msg is None:
        return "hello"
    words = [str(msg.get("op", "?"))]
    task = msg.get("task")
    if isinstance(task, dict) and task.get("name"):
        words.append(str(task["name"]))
    if isinstance(msg.get("cases"), list):
        kinds = sorted({str(c.get("kind")) for c in msg["cases"] if isinstance(c, dict)})
        words.append(f"{len(msg['cases'])} {'/'.join(kinds)} case(s)")
    words += [k for k in ("reference", "guard", "keep", "graph", "trace") if msg.get(k)]
    if "slot" in msg:
        words.append(f"slot {msg['slot']}")
    return " ".join(words)


def install(out: IO[str], min_s: float) -> None:
    """Wraps ChildProcess._exchange (every request and every child's hello go through it)."""
    exchange = pool.ChildProcess._exchange

    def traced(self: pool.ChildProcess, msg: dict | None, timeout_s: float, what: str) -> dict:
        t = time.monotonic()
        ok = "ok"
        try:
            reply = exchange(self, msg, timeout_s, what)
        except Exception as e:
            ok = f"failed: {str(e).splitlines()[0][:80]}"
            raise
        finally:
            dur = time.monotonic() - t
            op = describe(msg)
            with LOCK:
                TOTALS[op.split()[0]][0] += 1
                TOTALS[op.split()[0]][1] += dur
            if dur >= min_s or ok != "ok":
                phases = reply.get("phase_ms", {}) if ok == "ok" and isinstance(reply, dict) else {}
                shown = " ".join(f"{k}={v / 1e3:.1f}s" for k, v in phases.items() if v >= 100)
                print(f"{t - T0:8.1f} +{dur:7.2f}s pid {self.pids[-1]:>7} {op} {ok} {shown}".rstrip(),
                      file=out, flush=True)
        return reply
    pool.ChildProcess._exchange = traced  # type: ignore[method-assign]


def totals(out: IO[str]) -> None:
    print(f"--- after {time.monotonic() - T0:.1f} s: requests by op (count, total s)", file=out, flush=True)
    for op, (n, s) in sorted(TOTALS.items(), key=lambda kv: -kv[1][1]):
        print(f"{op:20} {n:6d} {s:9.1f}", file=out, flush=True)


def main() -> int:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", help="where the trace goes (default: stderr)")
    ap.add_argument("--min-s", type=float, default=0.2, help="list requests at least this long")
    args = ap.parse_args(argv[:cut])
    out = open(args.log, "a", buffering=1) if args.log else sys.stderr
    install(out, args.min_s)
    atexit.register(totals, out)
    run._sigterm_as_ctrl_c()
    return run.main(argv[cut + 1:])


if __name__ == "__main__":
    sys.exit(main())
