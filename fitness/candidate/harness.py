"""Guards the worker keeps around each candidate call (worker side only).

- LaunchHook: wraps Triton's launch path, so we know which kernels ran and can require that the
  candidate's own kernels did.
- TorchWorkMeter: counts elements produced by torch compute ops outside Triton launches, so a
  decoy kernel cannot leave the work to torch.
- Snapshot: identities of the runtime's callables, so a candidate that patches a timer, a torch
  function or our hooks is caught even if it slipped past the static gate.
- poison: fills harness-owned buffers with NaN before they are freed, so `torch.empty` in a
  candidate cannot inherit a correct result from an earlier call.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fitness.candidate.recorder import FREE_OPS, Recorder
from fitness.common.inputs import flat_items, poison_value, work_elements
from suites.task import nbytes as nbytes  # re-exported: a tensor list's storage bytes
from suites.task import to_device as to_device  # re-exported: the workers' copy onto the device

# Triton's launcher takes, before the kernel's own arguments: the grid (3), the stream, the
# function, the packed metadata, the launch metadata, and the enter and exit hooks
LAUNCHER_LEADING = 9


class CandidateError(Exception):
    """A check failed; the message is the verdict's reason."""


class LaunchHook:
    """Counts launches of @triton.jit functions by the module that defined them, and hands each
    launch to the recorder of the call in progress (fitness.candidate.recorder), if any."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.depth = 0  # >0 while inside Triton's launch machinery (autotune, interpreter copies)
        self.recorder: Recorder | None = None
        self._patched: list[tuple[Any, str, Callable]] = []  # (a Triton class, attribute, what it was given)
        # autotuning benchmarks run so far, and their seconds: a call that tuned re-ran kernels on
        # its own buffers, so its result is not comparable (fitness.process.child runs it again)
        self.tunings = 0
        self.tuning_s = 0.0

    def install(self) -> None:
        from triton.runtime import autotuner, interpreter, jit

        for cls, counts in ((jit.JITFunction, True), (interpreter.InterpretedFunction, True),
                            (autotuner.Autotuner, False), (autotuner.Heuristics, False)):
            self._wrap(cls, counts)
        self._wrap_bench(autotuner.Autotuner)
        self._wrap_compiled()

    def _wrap(self, cls: Any, counts_launch: bool) -> None:
        original = cls.run
        hook = self
        interpreted = cls.__name__ == "InterpretedFunction"

        def run(fn_self, *args, **kwargs):
            launch = counts_launch and not kwargs.get("warmup", False)
            if launch:
                module = getattr(getattr(fn_self, "fn", None), "__module__", "?")
                hook.counts[module] = hook.counts.get(module, 0) + 1
                if interpreted and hook.recorder is not None:
                    _record_interpreted(hook.recorder, fn_self, args, kwargs)
            rec = hook.recorder if counts_launch else None
            hook.depth += 1
            if rec is not None:
                rec.in_launch += 1
            try:
                return original(fn_self, *args, **kwargs)
            finally:
                hook.depth -= 1
                if rec is not None:
                    rec.in_launch -= 1

        cls.run = run
        self._patched.append((cls, "run", run))

    def _wrap_bench(self, cls: Any) -> None:
        """Counts the autotuner's benchmarks of one config each (Triton 3.x: `Autotuner._bench`)."""
        original = getattr(cls, "_bench", None)
        if original is None:
            return
        hook = self

        def bench(fn_self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(fn_self, *args, **kwargs)
            finally:
                hook.tunings += 1
                hook.tuning_s += time.perf_counter() - t0

        cls._bench = bench
        self._patched.append((cls, "_bench", bench))

    def _wrap_compiled(self) -> None:
        """Compiled launches are recorded where Triton calls the launcher: the kernel binary, the
        grid and the final arguments are all known there."""
        from triton.compiler.compiler import CompiledKernel

        hook = self
        prop = CompiledKernel.__dict__.get("run")
        if not isinstance(prop, property):
            return  # an older Triton: launches go unrecorded, and such traces do not replay

        def run(kernel):
            launcher = prop.fget(kernel)

            # the launcher's arguments passed through as one tuple (the hot launch path: one
            # splat, no names bound); the grid leads, the kernel's own arguments come last
            def recorded(*launch):
                if hook.recorder is not None:
                    hook.recorder.launch_compiled(kernel, launch[:3], launch[LAUNCHER_LEADING:])
                return launcher(*launch)
            return recorded

        CompiledKernel.run = property(run)

    def intact(self) -> bool:
        return all(getattr(cls, name) is fn for cls, name, fn in self._patched)

    def launches(self, module: str) -> int:
        return self.counts.get(module, 0)


def _record_interpreted(recorder: Recorder, fn_self: Any, args: tuple, kwargs: dict) -> None:
    import inspect

    fn = fn_self.fn
    spec = inspect.getfullargspec(fn)
    kw = {k: v for k, v in kwargs.items() if k in spec.args or k in spec.kwonlyargs}
    grid: Any = kwargs.get("grid")  # a tuple, or a function of the launch's arguments
    try:
        if callable(grid):
            grid = grid(inspect.getcallargs(fn, *args, **kw))
        recorder.launch_interpreted(fn, tuple(grid), args, kw)
    except Exception as e:  # noqa: BLE001 - an unreadable launch: the trace says so and fails
        recorder.problem = recorder.problem or f"a launch could not be recorded: {e}"


class TorchWorkMeter(TorchDispatchMode):
    """Elements produced by torch compute ops that ran outside Triton launches."""

    def __init__(self, hook: LaunchHook):
        super().__init__()
        self.hook = hook
        self.elements = 0
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if self.hook.depth == 0 and name not in FREE_OPS:
            n = work_elements(args, out)
            if n:
                self.elements += n
                self.ops[name] = self.ops.get(name, 0) + n
        return out


class Snapshot:
    """Identity of every callable attribute of the objects a candidate could patch to cheat."""

    def __init__(self, hook: LaunchHook):
        import triton.testing

        self.hook = hook
        self.targets = {
            "torch": torch, "torch.Tensor": torch.Tensor, "torch.cuda": torch.cuda,
            "torch.nn.functional": torch.nn.functional, "time": time, "threading": threading,
            "triton.testing": triton.testing, "torch.testing": torch.testing,
        }
        if os.environ.get("TE_DEVICE") == "cuda":  # never ask CUDA in the zygote: a fork could not use it
            self.targets["torch.cuda.Event"] = torch.cuda.Event
            self.targets["torch.cuda.CUDAGraph"] = torch.cuda.CUDAGraph
        self.saved = {name: self._callables(obj) for name, obj in self.targets.items()}

    @staticmethod
    def _callables(obj: object) -> dict:
        return {k: v for k, v in list(vars(obj).items()) if callable(v) and not isinstance(v, type(torch))}

    def changed(self) -> str:
        """Name of the first patched attribute, or ''."""
        if not self.hook.intact():
            return "triton launch path"
        for name, obj in self.targets.items():
            now = vars(obj)
            for k, v in self.saved[name].items():
                if now.get(k) is not v:
                    return f"{name}.{k}"
        return ""


def python_threads() -> int:
    return threading.active_count()


def poison(*tensors: object) -> None:
    """Overwrite harness-owned buffers before they are freed (NaN for floats, a max for ints)."""
    for t in flat_items(tensors):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        try:
            t.fill_(poison_value(t.dtype))
        except RuntimeError:
            pass  # a read-only or expanded view: nothing a later allocation could inherit


def storage_copy(t: torch.Tensor) -> torch.Tensor:
    """Bytes of the tensor's whole storage, to detect writes anywhere in an input buffer."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(s).clone()


def same_storage_bytes(t: torch.Tensor, saved: torch.Tensor) -> bool:
    s = t.untyped_storage()
    now = torch.empty(0, dtype=torch.uint8, device=t.device).set_(s)
    return now.numel() == saved.numel() and torch.equal(now, saved)


def aliases(out: torch.Tensor, inputs: Iterable[object]) -> bool:
    ptr = out.untyped_storage().data_ptr()
    return any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr and ptr != 0
               for a in inputs)
