"""Launch traces, recorded in the candidate's process (the replay: fitness.clean.replayer).

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
engine builds from the candidate's source alone (fitness.clean.kernel_source); the module itself is
never imported. Around them, a recorded torch op runs only as one of the engine's own primitives
(fitness.clean.primitives, a closed table: nothing is looked up in torch by the trace's strings), and
whether it is work is decided by what it did to memory. A trace the replayer cannot read, an op
outside the table, an output no recorded step wrote: each fails the candidate (check_trace).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from fitness.clean.compiled import describe_compiled

# aten ops that allocate, fill or re-view memory, by name: free for the in-process meter only
# (fitness.candidate.harness, a filter); the replay decides work by what a step did to memory
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
            try:  # nor any other mode's: the torch-work meter would count it as the candidate's
                with _disable_current_modes():
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
        if _triton_dtype(x):  # a Triton dtype handed to a kernel (TritonBench streamk_matmul): by its name
            return {"__tdtype__": str(x)}
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
        desc = self.kernels[key]
        signature = list(desc["signature"].values())
        declared = {desc["arg_names"].index(n) for n in desc["constexpr_args"] if n in desc["arg_names"]}
        enc: list = []
        for i, a in enumerate(args):
            kind = signature[i] if i < len(signature) else ""
            if kind == "constexpr" and i not in declared and type(a) is int:
                enc.append(a)  # an integer equal to 1 Triton specialized away: a value of the call (a read index)
            elif kind == "constexpr":
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


def _triton_dtype(x: object) -> bool:
    import triton.language as tl

    return isinstance(x, tl.dtype)


def _reinterpreted(x: object) -> bool:
    from triton.runtime.jit import TensorWrapper

    return type(x) is TensorWrapper
