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

On a GPU the replay loads the recorded compiled kernels (binaries and Triton's metadata) and
never imports the candidate module. Under the Triton interpreter (CPU) a kernel is Python, so
the replay imports the module and launches the recorded kernel functions directly, bypassing its
wrappers, heuristics and autotuner: a stronger filter there, not a wall.
"""
from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fitness.compiled import ReplayError as ReplayError  # re-exported: where a replay's failure was named
from fitness.compiled import describe_compiled, launch_compiled, load_compiled

# aten ops that allocate, fill or re-view memory: free to use around a kernel launch
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


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ReplayError(f"unknown dtype {name!r} in trace")
    return dt


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


# -------------------------------------------------------------------------------------------
class Replayer:
    """Runs a trace again on given inputs, in a clean process; `count` is the torch work done."""

    def __init__(self, trace: dict, device: str, module: ModuleType | None = None):
        self.trace = trace
        self.device = device
        self.module = module  # interpreter only: where the recorded kernel functions live
        self.torch_elements = 0
        self.torch_ops: dict[str, int] = {}
        self.snapshots = {int(k): v.to(device) for k, v in trace.get("snapshots", {}).items()}
        # under the interpreter the kernels are the module's functions; on a GPU, the recorded binaries
        self.kernels = {} if module is not None else \
            {k: load_compiled(d) for k, d in trace.get("kernels", {}).items()}
        if trace.get("problem"):
            raise ReplayError(trace["problem"])

    def run(self, inputs: tuple) -> list[torch.Tensor]:
        self.torch_elements = 0
        bufs: dict[int, torch.UntypedStorage] = {}
        for bid, b in enumerate(self.trace["buffers"]):
            if b["from"] == "input":
                a = inputs[b["index"]]
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
        return [self._decode(o, bufs) for o in self.trace["outputs"]]

    def _decode(self, x, bufs):
        if isinstance(x, list):
            return [self._decode(v, bufs) for v in x]
        if isinstance(x, dict):
            if "__t__" in x:
                return self._tensor(x["__t__"], bufs)
            if "__tw__" in x:  # a compiled kernel's binary already reads it as its dtype: the pointer is all
                t = self._tensor(x["__tw__"], bufs)
                return t if self.module is None else _reinterpret(t, x["__tw__"]["as"])
            if "__d__" in x:
                return {k: self._decode(v, bufs) for k, v in x["__d__"].items()}
            if "__dtype__" in x:
                return _dtype(x["__dtype__"])
            if "__device__" in x:
                return torch.device(self.device)
            if "__enum__" in x:
                return getattr(torch, x["__enum__"])
            raise ReplayError("unknown object in trace")
        return x

    def _tensor(self, r: dict, bufs) -> torch.Tensor:
        if r["t"] not in bufs:
            raise ReplayError(f"buffer {r['t']} used before the op that makes it")
        t = torch.empty(0, dtype=_dtype(r["dtype"]), device=self.device)
        try:
            return t.set_(bufs[r["t"]], r["off"], r["size"], r["stride"])
        except RuntimeError as e:
            raise ReplayError(f"a recorded view does not fit its buffer: {e}") from None

    def _op(self, ev: dict, bufs):
        try:
            packet = getattr(getattr(torch.ops, ev["ns"]), ev["name"])
            op = getattr(packet, ev["overload"] or "default")
        except (AttributeError, RuntimeError):
            raise ReplayError(f"unknown op {ev['ns']}::{ev['name']}.{ev['overload']}") from None
        args = self._decode(ev["args"], bufs)
        kwargs = self._decode(ev["kwargs"], bufs) or {}
        out = op(*args, **kwargs)
        self._bind(ev["out"], out, bufs, ev["name"])
        if ev["name"] not in FREE_OPS:
            from fitness.harness import work_elements

            n = work_elements((list(args), list(kwargs.values())), out)
            self.torch_elements += n
            self.torch_ops[ev["name"]] = self.torch_ops.get(ev["name"], 0) + n

    def _bind(self, declared, actual, bufs, name):
        if isinstance(declared, dict) and "__t__" in declared:
            r = declared["__t__"]
            if not isinstance(actual, torch.Tensor):
                raise ReplayError(f"{name} did not return the recorded tensor")
            if list(actual.shape) != r["size"] or str(actual.dtype).removeprefix("torch.") != r["dtype"]:
                raise ReplayError(f"{name} returned {tuple(actual.shape)} {actual.dtype}, recorded "
                                  f"{tuple(r['size'])} {r['dtype']}")
            bufs.setdefault(r["t"], actual.untyped_storage())
        elif isinstance(declared, list) and isinstance(actual, (list, tuple)) and len(declared) == len(actual):
            for d, a in zip(declared, actual):
                self._bind(d, a, bufs, name)

    def _launch(self, ev: dict, bufs):
        args = self._decode(ev["args"], bufs)
        grid = tuple(ev["grid"]) + (1,) * (3 - len(ev["grid"]))
        if any(g < 0 or g > 2**31 for g in grid):
            raise ReplayError("recorded grid out of range")
        if self.module is None:
            kernel = self.kernels.get(ev["kernel"])
            if kernel is None:
                raise ReplayError("a launch names a kernel the trace does not carry")
            launch_compiled(kernel, grid, args)
        else:
            fn = interpreted_kernel(self.module, ev["kernel"])
            kwargs = self._decode(ev.get("kwargs"), bufs) or {}
            fn.run(*args, grid=grid, warmup=False, **kwargs)


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


def interpreted_kernel(module: ModuleType, key: str) -> Any:
    """The module's @triton.jit function recorded as 'module:qualname', under any wrappers."""
    mod, _, qualname = key.partition(":")
    if mod != module.__name__:
        raise ReplayError(f"a launch of {key}, not a kernel of the candidate module")
    for value in list(vars(module).values()):
        fn = value
        for _ in range(8):  # Autotuner / Heuristics wrap the jit function as .fn
            inner = getattr(fn, "fn", None)
            if getattr(inner, "__qualname__", None) == qualname and getattr(inner, "__module__", None) == mod:
                if hasattr(fn, "run") and type(fn).__name__ in ("InterpretedFunction", "JITFunction"):
                    return fn
            if inner is None or inner is fn:
                break
            fn = inner
    raise ReplayError(f"the recorded kernel {qualname} is not a kernel of the module")
