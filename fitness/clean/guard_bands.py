"""Guard bands: whether a suite's reference reads or writes memory outside its inputs.

Some suite kernels index past their input tensors at the benchmark shapes (a per-block scale
read from a 0-dim tensor, a 128-row block loaded without bounds checks from a shorter sequence),
so their result depends on whatever bytes the allocator put next to the inputs. Two runs in one
process usually see the same neighbours, so such a reference passes its own correctness cases and
fails later, in the timing, with a message that does not name the defect.

The check: the reference child (fitness.process.child, the `script` op with `guard`) has just run each
benchmark input the usual way (each tensor a fresh copy: suites.task.to_device); it draws the same
inputs again and copies each tensor into the middle of a larger buffer whose bands on both sides
hold a poison value (NaN for floating dtypes, True for bools, the largest value for integers), then
calls the reference on views with the same shapes, strides and dtypes. A result that differs from
the usual one (a poisoned read; NaN usually propagates) or a band that changed (a write) makes
that input unstable; the engine (fitness.engine.script_eval) drops it from the timed inputs and names why.
A result that differs is confirmed by one more guarded call, so a reference that is merely not
reproducible is not blamed for reading outside its inputs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fitness.common.compare import compare_tree, on_device
from fitness.common.faults import is_cuda_fault
from fitness.common.inputs import draw_inputs, poison_value
from fitness.common.messages import Script
from suites.script import ZeroedEmpty, describe_inputs, seed_all, to_wire
from suites.task import Task, to_device

# bytes of band on each side of a tensor: its own size, at least GUARD_MIN_BYTES (attn_fwd_causal
# read ~16 KB past a 4-byte scale on the H100) and at most GUARD_MAX_BYTES (a 256 MiB input would
# otherwise take 768 MiB guarded)
GUARD_MIN_BYTES = 64 << 10
GUARD_MAX_BYTES = 64 << 20
# a guarded view's address keeps the original's remainder modulo this: Triton specializes kernels
# on pointer alignment, and the usual copy sits at that offset from an aligned allocation
ALIGN = 512

READS = "reads memory outside its inputs"
WRITES = "writes outside its inputs"
UNREPRODUCIBLE = "is not reproducible"
AROUND = "with NaN or extreme values around its inputs"


@dataclass(frozen=True)
class Finding:
    """Why one benchmark input is unstable: `what` (READS, WRITES or UNREPRODUCIBLE) and the detail."""

    what: str
    detail: str
    fatal: bool = False  # the guarded call faulted on the GPU: its child can serve nothing more

    @property
    def reason(self) -> str:
        return f"{self.what} ({self.detail})"

    def to_wire(self) -> dict:
        return {"what": self.what, "detail": self.detail}

    @staticmethod
    def from_wire(d: dict) -> Finding | None:
        return Finding(str(d["what"]), str(d.get("detail", ""))) if d.get("what") else None


def poison_bytes(dtype: torch.dtype) -> torch.Tensor:
    """One element of the poison value, as its bytes (uint8); all ones where torch cannot fill the dtype."""
    one = torch.empty(1, dtype=dtype)
    try:
        one.fill_(poison_value(dtype))
        return one.view(torch.uint8).reshape(-1)
    except (RuntimeError, TypeError):
        return torch.full((one.element_size(),), 0xFF, dtype=torch.uint8)


def extent_bytes(t: torch.Tensor) -> int:
    """Bytes from a tensor's first element to the end of its last (gaps between strides included)."""
    span = 1 + sum((int(size) - 1) * abs(int(stride)) for size, stride in zip(t.shape, t.stride()))
    return span * t.element_size()


@dataclass
class Guarded:
    """One tensor input copied into the middle of a poisoned buffer."""

    name: str  # where it sits among the call's arguments ("input 1", "input 2[0]")
    buffer: torch.Tensor  # uint8: lower band, the tensor's bytes [start, end), upper band
    start: int
    end: int
    pattern: torch.Tensor  # the poison element's bytes, on the buffer's device
    view: torch.Tensor  # what the call gets: the original's shape, strides and dtype

    def changed(self) -> str:
        """'' while both bands hold the poison, else which bytes around the tensor changed."""
        e = self.pattern.numel()
        low, high = self.buffer[:self.start], self.buffer[self.end:]
        # counted in whole elements of the poison: a 0.0 written over NaN differs in 2 of its 4 bytes
        before = e * int(low.view(-1, e).ne(self.pattern).any(dim=1).sum())
        after = e * int(high.view(-1, e).ne(self.pattern).any(dim=1).sum())
        if not before and not after:
            return ""
        where = " and ".join(f"{n} of the {len(band)} bytes {side} it" for n, band, side in
                             ((before, low, "before"), (after, high, "after")) if n)
        return f"{where} changed around {self.name} ({describe_inputs((self.view,))})"


def guard(t: torch.Tensor, device: str, name: str) -> Guarded:
    """`t`'s elements on `device`, inside guard bands (the bytes between its strides copied too)."""
    elem = t.element_size()
    length = extent_bytes(t)
    band = min(GUARD_MAX_BYTES, max(GUARD_MIN_BYTES, -(-length // ALIGN) * ALIGN))
    offset = int(t.storage_offset()) * elem
    start = band + offset % ALIGN
    pattern = poison_bytes(t.dtype).to(device)
    buffer = torch.empty(start + length + band, dtype=torch.uint8, device=device)
    buffer.view(-1, elem).copy_(pattern.expand(buffer.numel() // elem, elem))
    source = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage(), offset, (length,), (1,))
    buffer[start:start + length].copy_(source)
    view = torch.empty(0, dtype=t.dtype, device=device).set_(buffer.untyped_storage(), start // elem, t.shape,
                                                             t.stride())
    return Guarded(name, buffer, start, start + length, pattern, view)


def guard_args(args: tuple, device: str) -> tuple[tuple, list[Guarded]]:
    """The call's arguments with every tensor guarded (lists and tuples walked, as to_device
    does), and the guards, to check afterwards."""
    guards: list[Guarded] = []

    def walk(a: Any, name: str) -> Any:
        if isinstance(a, (list, tuple)) and type(a) in (list, tuple):
            return type(a)(walk(x, f"{name}[{i}]") for i, x in enumerate(a))
        if not isinstance(a, torch.Tensor) or a.numel() == 0:
            return to_device(a, device)
        guards.append(guard(a, device, name))
        return guards[-1].view
    return tuple(walk(a, f"input {i}") for i, a in enumerate(args)), guards


def _first_line(e: BaseException, width: int) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:width]}"


def _call(fn: Callable[..., Any], args: tuple, device: str, seed: int) -> Any:
    seed_all(seed)  # as the usual run: a wrapper that draws random numbers (batched_vecmat_mult) draws the same
    with ZeroedEmpty():  # as the usual run: buffers the suite leaves uninitialized read as zeros
        tree = fn(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    return tree


def check_case(host: tuple, usual: Any, fn: Callable[..., Any], tolerance: dict, device: str,
               seed: int) -> Finding | None:
    """The guarded call on `host` (the drawn inputs) against `usual` (the plain call's result, on
    the wire); None when nothing changed. A result that differs is confirmed by a second guarded
    call: the same again says the neighbours made the difference; another one, that the reference
    is not reproducible. (Not a second plain call: one that reads outside its inputs can see other
    neighbours each time; seen on attn_fwd_causal under the interpreter.)"""
    args, guards = guard_args(host, device)
    try:
        tree = to_wire(_call(fn, args, device, seed))
    except Exception as e:  # noqa: BLE001 - the suite's kernel, failing on poisoned neighbours
        return Finding(READS, f"{AROUND}, the call fails: {_first_line(e, 200)}", is_cuda_fault(e))
    wrote = "; ".join(filter(None, (g.changed() for g in guards)))
    if wrote:
        return Finding(WRITES, wrote)
    problem = compare_tree(on_device(tree, device), usual, tolerance, path="output")
    if not problem:
        return None
    again_tree = to_wire(_call(fn, guard_args(host, device)[0], device, seed))
    again = compare_tree(on_device(again_tree, device), tree, tolerance, path="output")
    if again:
        return Finding(UNREPRODUCIBLE, f"two calls on the same inputs differ: {again}")
    return Finding(READS, f"{AROUND}, {problem}")


def guard_reply(reply: dict, req: Script, task: Task, fn: Callable[..., Any], device: str) -> dict:
    """The `script` op's reply for benchmark cases, with `guard`: per case, in order, {} when
    stable, a Finding's wire form, or {"unchecked": why}. A CUDA fault ends the list there (the
    context is lost) and marks the reply fatal. `keep` false: the usual results stay here."""
    findings: list[dict] = []
    for case, result in zip(req.cases, reply["results"]):
        try:
            host = draw_inputs(task, case, case["seed"])
            finding = check_case(host, result["tree"], fn, task.tolerance, device, case["seed"])
        except (torch.OutOfMemoryError, MemoryError) as e:  # the bands' memory, not the suite's fault
            findings.append({"unchecked": f"no memory for its guard bands ({_first_line(e, 120)})"})
            continue
        findings.append(finding.to_wire() if finding else {})
        if finding and finding.fatal:
            reply["fatal"] = True
            break
    if not req.keep:
        for result in reply["results"]:
            result.pop("tree", None)
    return {**reply, "guard": findings}
