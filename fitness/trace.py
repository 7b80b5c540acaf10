"""Launch traces: what a candidate's call did on the device, recorded in the candidate's process
and replayed alone, in a process that never ran the candidate's Python, on fresh inputs.

Nothing a candidate's process reports is evidence by itself (it may have patched any check
there). A trace is: the aten ops its call dispatched and the Triton kernels it launched, in
order, with every tensor argument named as a buffer (an input of the call, a buffer an op or a
kernel produced, or, for memory that appeared from elsewhere, a copy of its contents when first
seen). The replayer runs exactly that program on inputs drawn from a seed the candidate never
saw. Whatever the candidate computed outside it (torch work hidden from the recorder, numpy on
`.numpy()` views, Python on `.tolist()`, answers prepared at import) is stale on the new inputs,
so the replayed outputs are wrong and the engine rejects it. Torch work is counted on the
replay, where the candidate cannot forge the count, and the replay is also what gets timed.

The replay runs only what the engine can name. On a GPU: the recorded compiled kernels (binaries
and Triton's metadata), whose pointer arguments must be buffers the replay allocated from the
recorded layout. Under the Triton interpreter (CPU), where a kernel is Python: the kernels the
engine builds from the candidate's source alone (fitness.kernel_source); the module itself is
never imported. Around them, a recorded torch op runs only as one of the engine's own primitives
(fitness.primitives, a closed table: nothing is looked up in torch by the trace's strings), and
whether it is work is decided by what it did to memory. A trace the replayer cannot read, an op
outside the table, an output no recorded step wrote: each fails the candidate (check_trace).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fitness.compiled import ReplayError as ReplayError  # re-exported: where a replay's failure was named
from fitness.compiled import check_launch_args, describe_compiled, launch_compiled, load_compiled
from fitness.primitives import COPY, DTYPES, ENUMS, FILL, PRIMITIVES, READ, VIEW, Device, Prim, check_args
from fitness.trace_check import check_trace as check_trace  # re-exported: the trace's shape, checked

# aten ops that allocate, fill or re-view memory, by name: free for the in-process meter only
# (fitness.harness, a filter); the replay decides work by what a step did to memory
FREE_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "zero_", "fill_", "full", "full_like", "new_full", "ones", "ones_like", "new_ones",
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "squeeze", "unsqueeze", "t",
    "transpose", "permute", "select", "slice", "alias", "detach", "split", "split_with_sizes",
    "unbind", "narrow", "view_as", "arange", "lift_fresh", "_reshape_alias", "set_", "resize_",
    "numel", "size", "stride", "is_contiguous", "sym_size", "sym_stride", "sym_numel",
    "_local_scalar_dense", "record_stream", "unsqueeze_", "squeeze_", "t_", "transpose_", "empty_permuted",
}
# a copy of memory the recorder did not see produced: beyond this it is refused (it is how a
# precomputed answer would travel, and a kernel needs no such thing)
MAX_SNAPSHOT_BYTES = 1 << 30


class Recorder(TorchDispatchMode):
    """Records one call. Used inside the candidate's process: a filter that a candidate can
    break, never a check that it can pass by breaking it (a broken trace does not replay)."""

    def __init__(self, inputs: tuple):
        super().__init__()
        self.events: list[dict] = []
        self.buffers: list[dict] = []
        self.snapshots: dict[int, torch.Tensor] = {}
        self.kernels: dict[str, dict] = {}
        self._ids: dict[tuple, int] = {}
        self._keep: list = []  # storages held so that no address is reused during the call
        self.in_launch = 0
        self.problem = ""
        for i, a in enumerate(inputs):
            if isinstance(a, torch.Tensor):
                self._new(a, {"from": "input", "index": i})

    # -- buffers -----------------------------------------------------------------------------
    def _new(self, t: torch.Tensor, how: dict) -> int:
        s = t.untyped_storage()
        self.buffers.append({**how, "nbytes": s.nbytes()})
        self._keep.append(s)
        bid = len(self.buffers) - 1
        if s.data_ptr():
            self._ids[(str(s.device), s.data_ptr())] = bid
        return bid

    def _id(self, t: torch.Tensor, produced: bool = False) -> int:
        s = t.untyped_storage()
        bid = self._ids.get((str(s.device), s.data_ptr())) if s.data_ptr() else None
        if bid is not None:
            return bid
        if produced:
            return self._new(t, {"from": "op"})
        bid = self._new(t, {"from": "snapshot"})
        if s.nbytes() > MAX_SNAPSHOT_BYTES:
            self.problem = f"a tensor of {s.nbytes()} bytes appeared from outside the recorded call"
        else:
            self.in_launch += 1  # the copy is the recorder's own work, not the call's
            try:
                self.snapshots[bid] = torch.empty(0, dtype=torch.uint8, device=s.device).set_(s).cpu().clone()
            finally:
                self.in_launch -= 1
        return bid

    def ref(self, t: torch.Tensor, produced: bool = False) -> dict:
        return {"t": self._id(t, produced), "off": t.storage_offset(), "size": list(t.shape),
                "stride": list(t.stride()), "dtype": str(t.dtype).removeprefix("torch.")}

    def encode(self, x: Any, produced: bool = False) -> Any:
        if isinstance(x, torch.Tensor):
            if type(x) is not torch.Tensor and not isinstance(x, torch.nn.Parameter):
                self.problem = f"a {type(x).__name__} (not a plain tensor) reached the device work"
            return {"__t__": self.ref(x, produced)}
        if isinstance(x, (list, tuple)):
            return [self.encode(v, produced) for v in x]
        if isinstance(x, dict):
            return {"__d__": {str(k): self.encode(v, produced) for k, v in x.items()}}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, torch.dtype):
            return {"__dtype__": str(x).removeprefix("torch.")}
        if isinstance(x, torch.device):
            return {"__device__": x.type}
        if isinstance(x, (torch.layout, torch.memory_format)):
            return {"__enum__": str(x).removeprefix("torch.")}
        if _reinterpreted(x):  # triton.reinterpret: a tensor's memory read as another Triton dtype
            if type(x.base) is not torch.Tensor:
                self.problem = f"a {type(x.base).__name__} (not a plain tensor) reached the device work"
                return None
            return {"__tw__": {**self.ref(x.base, produced), "as": str(x.dtype)}}
        self.problem = self.problem or f"an argument of type {type(x).__name__} cannot be replayed"
        return None

    # -- ops -----------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.in_launch:  # Triton's own machinery inside a launch: the replay's launch does it again
            return func(*args, **kwargs)
        ev = {"kind": "op", "ns": func.namespace, "name": func._schema.name.split("::")[-1],
              "overload": func._overloadname, "args": self.encode(args), "kwargs": self.encode(kwargs)}
        out = func(*args, **kwargs)
        ev["out"] = self.encode(out, produced=True)
        self.events.append(ev)
        return out

    # -- launches --------------------------------------------------------------------------
    def launch_compiled(self, kernel: Any, grid: tuple, args: tuple) -> None:
        key = str(getattr(kernel, "hash", id(kernel)))
        if key not in self.kernels:
            self.kernels[key] = describe_compiled(kernel)
        signature = list(self.kernels[key]["signature"].values())
        enc: list = []
        for i, a in enumerate(args):
            kind = signature[i] if i < len(signature) else ""
            if kind == "constexpr":
                enc.append(None)
            elif str(kind).startswith("tensordesc") or str(kind).startswith("nvTmaDesc"):
                self.problem = "kernels taking tensor descriptors cannot be replayed yet"
                enc.append(None)
            else:
                enc.append(self.encode(a))
        self.events.append({"kind": "launch", "kernel": key, "grid": [int(g) for g in grid], "args": enc})

    def launch_interpreted(self, fn: Any, grid: Iterable[int], args: tuple, kwargs: dict) -> None:
        self.events.append({"kind": "launch", "kernel": f"{fn.__module__}:{fn.__qualname__}",
                            "grid": [int(g) for g in grid], "args": self.encode(args),
                            "kwargs": self.encode(kwargs)})

    def trace(self, outputs: list) -> dict:
        outs = [self.encode(o) for o in outputs]
        return {"events": self.events, "buffers": self.buffers, "outputs": outs, "kernels": self.kernels,
                "snapshots": {str(k): v for k, v in self.snapshots.items()}, "problem": self.problem}


class Replayer:
    """Runs a trace again on given inputs, in a clean process; `torch_elements` is the torch work
    done. It runs only what the engine can name: the recorded compiled kernels (on a GPU), the
    kernels built from the candidate's source alone (`kernels`, under the interpreter:
    fitness.kernel_source), and the engine's own primitives (fitness.primitives)."""

    def __init__(self, trace: dict, device: str, kernels: dict[str, Any] | None = None,
                 inplace: tuple[int, ...] = ()):
        check_trace(trace, inplace)
        self.trace = trace
        self.device = device
        self.interpreted = kernels is not None
        self.torch_elements = 0
        self.torch_ops: dict[str, int] = {}
        self.snapshots = {int(k): v.to(device) for k, v in trace["snapshots"].items()}
        # under the interpreter the kernels the engine built from the source; on a GPU, the recorded binaries
        self.kernels = kernels if kernels is not None else \
            {k: load_compiled(d) for k, d in trace["kernels"].items() if isinstance(k, str)}

    def run(self, inputs: tuple) -> list[torch.Tensor]:
        self.torch_elements = 0
        self.torch_ops = {}
        bufs: dict[int, torch.UntypedStorage] = {}
        self.written: set[int] = set()  # buffers a launch or a writing step touched
        for bid, b in enumerate(self.trace["buffers"]):
            if b["from"] == "input":
                a = inputs[b["index"]] if 0 <= b["index"] < len(inputs) else None
                if not isinstance(a, torch.Tensor) or a.untyped_storage().nbytes() != b["nbytes"]:
                    raise ReplayError(f"input {b['index']} does not have the recorded layout")
                bufs[bid] = a.untyped_storage()
            elif b["from"] == "snapshot":
                bufs[bid] = self.snapshots[bid].clone().untyped_storage()
        for ev in self.trace["events"]:
            if ev["kind"] == "op":
                self._op(ev, bufs)
            else:
                self._launch(ev, bufs)
        outs = [self._decode(o, bufs) for o in self.trace["outputs"]]
        for i, o in enumerate(self.trace["outputs"]):
            if o["__t__"]["t"] not in self.written:
                raise ReplayError(f"output {i} is memory that no recorded kernel or step wrote")
        return outs

    def _decode(self, x: Any, bufs: dict, kw: bool = False) -> Any:
        if isinstance(x, list):
            return [self._decode(v, bufs) for v in x]
        if isinstance(x, dict):
            if len(x) != 1:
                raise ReplayError("an unreadable object in the trace")
            (tag, v), = x.items()
            if tag == "__t__":
                return self._tensor(v, bufs)
            if tag == "__tw__":  # a compiled kernel's binary already reads it as its dtype: the pointer is all
                t = self._tensor(v, bufs)
                return t if not self.interpreted else _reinterpret(t, v.get("as"))
            if tag == "__d__" and kw and isinstance(v, dict):
                return {str(k): self._decode(a, bufs) for k, a in v.items()}
            if tag == "__dtype__" and v in DTYPES:
                return DTYPES[v]
            if tag == "__device__":
                return Device()
            if tag == "__enum__" and v in ENUMS:
                return ENUMS[v]
            raise ReplayError(f"an object the replay does not know in the trace ({str(tag)[:40]})")
        if x is None or type(x) in (bool, int, float, str):
            return x
        raise ReplayError("an unreadable value in the trace")

    def _tensor(self, r: Any, bufs: dict) -> torch.Tensor:
        if not isinstance(r, dict) or type(r.get("t")) is not int or type(r.get("off")) is not int \
                or not _ints(r.get("size")) or not _ints(r.get("stride")) or r.get("dtype") not in DTYPES:
            raise ReplayError("an unreadable tensor in the trace")
        if r["t"] not in bufs:
            raise ReplayError(f"buffer {r['t']} used before the step that makes it")
        t = torch.empty(0, dtype=DTYPES[r["dtype"]], device=self.device)
        try:
            return t.set_(bufs[r["t"]], r["off"], r["size"], r["stride"])
        except (RuntimeError, ValueError, TypeError, OverflowError) as e:
            raise ReplayError(f"a recorded view does not fit its buffer: {e}") from None

    def _op(self, ev: dict, bufs: dict) -> None:
        """One recorded torch op, by the engine's own primitive of that key (never a lookup in torch)."""
        key = f"{ev.get('name')}.{ev.get('overload') or 'default'}"
        prim = PRIMITIVES.get(key) if ev.get("ns") == "aten" else None
        if prim is None:
            raise ReplayError(f"torch did work outside Triton kernels that the replay cannot verify: the trace "
                              f"holds {str(ev.get('ns'))[:40]}::{key[:80]}, not one of the engine's primitives "
                              "(views, allocation, fills, copies, elementwise basics)")
        args = self._decode(ev["args"], bufs)
        kwargs = self._decode(ev.get("kwargs") or {"__d__": {}}, bufs, kw=True)
        if not isinstance(kwargs, dict):
            raise ReplayError(f"{key}: unreadable keywords in the trace")
        check_args(key, prim, args, kwargs)
        sources = {a.untyped_storage().data_ptr() for a in _flat(args) if isinstance(a, torch.Tensor)}
        try:
            out = prim.impl(self.device, *args, **kwargs)
        except (RuntimeError, ValueError, TypeError, IndexError, OverflowError) as e:
            raise ReplayError(f"{key} failed on the recorded arguments: {str(e)[:200]}") from None
        if prim.effect == READ:  # a number for the host: the trace's later steps carry their own values
            if type(ev.get("out")) not in (bool, int, float) or args[0].numel() != 1:
                raise ReplayError(f"{key} did not read the one-element tensor the trace recorded")
            return
        made = self._bind(ev.get("out"), out, bufs, key)
        self._account(key, prim, args, out, made, sources)

    def _account(self, key: str, prim: Prim, args: list, out: Any, made: list[int], sources: set[int]) -> None:
        """Work by what the step did to memory: a view whose result left its source's storage is
        a copy; a copy or arithmetic counts the elements it read or wrote."""
        results = [o for o in _flat(out) if isinstance(o, torch.Tensor)]
        copied = prim.effect == COPY or (prim.effect == VIEW and any(
            o.untyped_storage().data_ptr() not in sources for o in results))
        if prim.effect in (FILL, COPY) or copied:
            self.written.update(made)
        if copied:
            from fitness.harness import work_elements

            n = work_elements(args, out)
            self.torch_elements += n
            self.torch_ops[key] = self.torch_ops.get(key, 0) + n

    def _bind(self, declared: Any, actual: Any, bufs: dict, key: str) -> list[int]:
        """The step's results against what the trace says it returned, buffer by buffer; the
        buffers bound (a new one only where the trace names a buffer the call made)."""
        if isinstance(declared, list) and isinstance(actual, (list, tuple)) and len(declared) == len(actual):
            return [b for d, a in zip(declared, actual) for b in self._bind(d, a, bufs, key)]
        if not (isinstance(declared, dict) and isinstance(declared.get("__t__"), dict)
                and type(actual) is torch.Tensor):
            raise ReplayError(f"{key} did not return what the trace recorded")
        r = declared["__t__"]
        got = {"size": list(actual.shape), "stride": list(actual.stride()), "off": actual.storage_offset(),
               "dtype": str(actual.dtype).removeprefix("torch.")}
        if any(r.get(k) != v for k, v in got.items()):
            raise ReplayError(f"{key} returned {tuple(actual.shape)} {actual.dtype} at stride "
                              f"{tuple(actual.stride())}, not the recorded tensor")
        bid, storage = r.get("t"), actual.untyped_storage()
        buffers = self.trace["buffers"]
        if type(bid) is not int or not 0 <= bid < len(buffers):
            raise ReplayError(f"{key} returned a buffer the trace does not list")
        if bid in bufs:
            if bufs[bid].data_ptr() != storage.data_ptr():
                raise ReplayError(f"{key} returned memory other than the recorded buffer {bid}")
        elif buffers[bid]["from"] != "op" or buffers[bid]["nbytes"] != storage.nbytes() or \
                any(s.data_ptr() == storage.data_ptr() for s in bufs.values()):
            raise ReplayError(f"{key} returned memory that does not match the recorded new buffer {bid}")
        else:
            bufs[bid] = storage
        return [bid]

    def _launch(self, ev: dict, bufs: dict) -> None:
        args = self._decode(ev["args"], bufs)
        recorded, name = ev.get("grid"), ev.get("kernel")
        if not isinstance(recorded, list) or not _ints(recorded) or not 1 <= len(recorded) <= 3 \
                or any(g < 0 or g > 2**31 for g in recorded):
            raise ReplayError("recorded grid out of range")
        grid = tuple(recorded) + (1,) * (3 - len(recorded))
        kernel = self.kernels.get(name) if isinstance(name, str) else None
        if kernel is None:
            raise ReplayError(f"a launch names a kernel the replay does not have: {str(ev.get('kernel'))[:120]}")
        self.written.update(r["t"] for r in _tensor_refs(ev["args"]))
        if self.interpreted:
            kwargs = self._decode(ev.get("kwargs") or {"__d__": {}}, bufs, kw=True)
            if not isinstance(kwargs, dict):
                raise ReplayError("a launch's keywords cannot be read")
            self.written.update(r["t"] for r in _tensor_refs(ev.get("kwargs")))
            kernel.run(*args, grid=grid, warmup=False, **kwargs)
        else:
            check_launch_args(kernel, args)
            launch_compiled(kernel, grid, args)


def _ints(v: object) -> bool:
    return isinstance(v, list) and all(type(i) is int for i in v)


def _flat(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in _flat(v)]
    return [x]


def _tensor_refs(x: Any) -> list[dict]:
    """Every tensor a recorded argument names (a launch may write any of them)."""
    if isinstance(x, list):
        return [r for v in x for r in _tensor_refs(v)]
    if isinstance(x, dict):
        for tag in ("__t__", "__tw__"):
            if tag in x and isinstance(x[tag], dict):
                return [x[tag]]
        return [r for v in x.values() for r in _tensor_refs(v)]
    return []


def _reinterpreted(x: object) -> bool:
    from triton.runtime.jit import TensorWrapper

    return type(x) is TensorWrapper


def _reinterpret(t: torch.Tensor, name: object) -> Any:
    """The interpreter's view of a recorded triton.reinterpret: the tensor as Triton dtype `name`."""
    import triton
    import triton.language as tl

    names = tl.dtype.SINT_TYPES + tl.dtype.UINT_TYPES + tl.dtype.FP_TYPES
    if name not in names:
        raise ReplayError(f"a reinterpreted tensor of unknown Triton dtype {name!r} in trace")
    return triton.reinterpret(t, tl.dtype(name))
