"""The shape of a launch trace (fitness.clean.replayer), checked before anything of it runs: every field of
the kind the replay reads, every buffer named by a known origin, every output a buffer the call
itself made. It is separate from the recorder and the replayer because it reads only the trace's
structure (no device, no kernels, no primitives): the one gate every trace passes, whoever made it.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from fitness.clean.compiled import ReplayError
from fitness.clean.primitives import ALLOC, PRIMITIVES, VIEW

_SOURCES = ("input", "op", "snapshot")


def check_trace(trace: object, inplace: tuple[int, ...] = (), destinations: bool = False) -> None:
    """The trace's shape, before anything of it runs: every field of the kind the replay reads,
    every buffer named by a known origin, every output a buffer the call made or a module-level
    buffer it wrote (the replay checks the writing), or, for a task that updates inputs in place
    (`inplace`: their indices), output i that input inplace[i]; with `destinations` (a suite's
    call, whose arguments may be where it writes its results), any input it wrote.
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
        elif buffers[bid]["from"] == "input" and not destinations:
            raise ReplayError(f"output {i} of the trace is input {buffers[bid]['index']} of the call, which the "
                              "task does not update in place (a task that does says so: INPLACE)")


Constexprs = dict[str, tuple[tuple[int, ...], frozenset[str]]]  # kernel qualname -> (positions, names)


def program_of(trace: dict, constexprs: Constexprs | None = None,
               build: Callable[[dict], object] | None = None) -> tuple:
    """What a checked trace runs, values aside: each op's name and each launch's kernel, grid and
    constexpr values, with every tensor's layout. On a GPU a launch names its compiled binary,
    constexprs included; under the interpreter it names a function, so the values of its
    `tl.constexpr` parameters (`constexprs`, read from the source: kernel_source.constexpr_params)
    are kept. With `build` (a recorded binary's description -> its build: constexprs and options),
    a compiled launch names its build instead: Triton's own specialization of a value (a row
    read equal to 1) makes another binary of the same program. Other scalars (sizes, seeds, a
    learning rate, a row read with `.item()`) may follow the values and are left out, as are the
    grids after a host read. Two calls of one shape and dtype run one program
    (fitness.engine.replay). Allocations and views are no part of it: a workspace
    made on a shape's first call and kept is honest."""
    reads = False
    steps: list[tuple] = []
    builds: dict[str, str] = {}  # a kernel's build, read once per trace (its metadata is JSON)
    for ev in trace["events"]:
        if ev.get("kind") == "op":
            reads = reads or type(ev.get("out")) in (bool, int, float)
            if _bookkeeping(ev):
                continue
            steps.append(("op", str(ev.get("ns")), str(ev.get("name")), str(ev.get("overload")),
                          _layout(ev.get("args")), _layout(ev.get("kwargs"))))
            continue
        kernel = str(ev.get("kernel"))
        desc = trace["kernels"].get(kernel) if build is not None else None
        if build is not None and isinstance(desc, dict):
            if kernel not in builds:
                builds[kernel] = repr(build(desc))
            kernel = builds[kernel]
        positions, names = (constexprs or {}).get(kernel.rpartition(":")[2], ((), frozenset()))
        args = ev.get("args") if isinstance(ev.get("args"), list) else []
        kwargs = ev.get("kwargs", {}).get("__d__", {}) if isinstance(ev.get("kwargs"), dict) else {}
        fixed = tuple((i, _plain(args[i])) for i in positions if i < len(args)) + \
            tuple(sorted((k, _plain(v)) for k, v in kwargs.items() if k in names)) if isinstance(kwargs, dict) else ()
        steps.append(("launch", kernel, () if reads else tuple(ev.get("grid") or ()), fixed,
                      _layout(args), _layout(kwargs)))
    return tuple(steps)


def _bookkeeping(ev: dict) -> bool:
    """An op that only allocates or re-views memory (by the engine's own table's effects)."""
    name = str(ev.get("name"))
    prim = PRIMITIVES.get(f"{name}.{ev.get('overload') or 'default'}")
    return (prim is not None and prim.effect in (ALLOC, VIEW)) or name.startswith(("empty", "new_empty"))


def _plain(v: object) -> object:
    return v if v is None or type(v) in (bool, int, float, str) else repr(v)[:40]


def _layout(x: object) -> object:
    """A recorded argument as its structure: tensors by size, stride and dtype, scalars by type."""
    if isinstance(x, list):
        return tuple(_layout(v) for v in x)
    if isinstance(x, dict):
        ref = x.get("__t__") or x.get("__tw__")
        if isinstance(ref, dict):
            return ("T", str(ref.get("size")), str(ref.get("stride")), str(ref.get("dtype")), str(ref.get("as", "")))
        return tuple(sorted((str(k), _layout(v)) for k, v in x.items()))
    return type(x).__name__


def first_difference(a: tuple, b: tuple) -> str:
    """Where two programs (program_of) part, in words."""
    if len(a) != len(b):
        return f"{len(a)} steps against {len(b)}"
    k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    what = {"op": lambda s: f"aten::{s[2]}.{s[3]}",
            "launch": lambda s: f"kernel {s[1][:60]} on grid {s[2]}" + (f" with {dict(s[3])}" if s[3] else "")}
    return f"step {k}: {what[a[k][0]](a[k])} against {what[b[k][0]](b[k])}" + \
        (" (the same, with other arguments)" if a[k][:3] == b[k][:3] else "")
