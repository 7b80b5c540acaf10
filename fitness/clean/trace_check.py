"""The shape of a launch trace (fitness.clean.replayer), checked before anything of it runs: every field of
the kind the replay reads, every buffer named by a known origin, every output a buffer the call
itself made. It is separate from the recorder and the replayer because it reads only the trace's
structure (no device, no kernels, no primitives): the one gate every trace passes, whoever made it.
"""
from __future__ import annotations

import torch

from fitness.clean.compiled import ReplayError

_SOURCES = ("input", "op", "snapshot")


def check_trace(trace: object, inplace: tuple[int, ...] = ()) -> None:
    """The trace's shape, before anything of it runs: every field of the kind the replay reads,
    every buffer named by a known origin, every output a buffer the call itself made, or, for a
    task that updates inputs in place (`inplace`: their indices), output i that input inplace[i].
    A ReplayError says what could not be read (a trace the replayer cannot interpret fails the
    candidate)."""
    if not isinstance(trace, dict):
        raise ReplayError("the call's trace is not a record")
    if trace.get("problem"):
        raise ReplayError(str(trace["problem"]))
    kinds = {"events": list, "buffers": list, "outputs": list, "kernels": dict, "snapshots": dict}
    for key, kind in kinds.items():
        if not isinstance(trace.get(key), kind):
            raise ReplayError(f"the trace's {key} cannot be read")
    buffers = trace["buffers"]
    for b in buffers:
        if not isinstance(b, dict) or b.get("from") not in _SOURCES or type(b.get("nbytes")) is not int \
                or b["nbytes"] < 0 or (b["from"] == "input" and type(b.get("index")) is not int):
            raise ReplayError("a buffer of the trace cannot be read")
    for k, snap in trace["snapshots"].items():
        bid = int(k) if isinstance(k, str) and k.isdigit() else -1
        if not 0 <= bid < len(buffers) or buffers[bid]["from"] != "snapshot" or type(snap) is not torch.Tensor \
                or snap.dtype != torch.uint8 or snap.dim() != 1 or snap.numel() != buffers[bid]["nbytes"]:
            raise ReplayError("a snapshot of the trace does not match its buffer")
    if any(b["from"] == "snapshot" and str(i) not in trace["snapshots"] for i, b in enumerate(buffers)):
        raise ReplayError("a buffer copied from outside the call has no recorded contents")
    for ev in trace["events"]:
        if not isinstance(ev, dict) or ev.get("kind") not in ("op", "launch") or not isinstance(ev.get("args"), list):
            raise ReplayError("an event of the trace cannot be read")
    for i, out in enumerate(trace["outputs"]):
        if not isinstance(out, dict) or not isinstance(out.get("__t__"), dict):
            raise ReplayError(f"output {i} of the trace is not a recorded tensor")
        bid = out["__t__"].get("t")
        if type(bid) is not int or not 0 <= bid < len(buffers):
            raise ReplayError(f"output {i} of the trace names no buffer of it")
        if inplace and buffers[bid]["from"] == "input":
            if i >= len(inplace) or buffers[bid]["index"] != inplace[i]:
                raise ReplayError(f"output {i} of the trace is input {buffers[bid]['index']} of the call, not the "
                                  f"input the task updates in place there")
        elif buffers[bid]["from"] != "op":
            where = "an input of the call" if buffers[bid]["from"] == "input" else \
                "memory that appeared from outside the recorded call"
            raise ReplayError(f"output {i} of the trace is {where}, not memory the call made")
