"""A child's script-task requests (TritonBench, ROCm, KernelBench): the suite's reference on a
list of cases, and one call of a case by the reference or a candidate (fitness.process.child.Child)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from fitness.candidate.harness import CandidateError, LaunchHook, TorchWorkMeter, python_threads, to_device
from fitness.candidate.recorder import Recorder
from fitness.clean.guard_bands import guard_reply
from fitness.common.inputs import draw_inputs
from fitness.common.messages import Script, TaskSpec
from fitness.process.child_failures import run_cases, trim_trace
from suites.script import ZeroedEmpty, for_here, seed_all, tensors_of, to_wire
from suites.task import Task


class ScriptSide:
    """Mixed into fitness.process.child.Child, whose state and helpers these requests use."""

    hook: LaunchHook
    device: str
    warmed: set
    task: Callable[[TaskSpec], Task]
    start_device: Callable[[], None]
    _import: Callable[..., tuple[ModuleType | None, dict | None]]
    _tick: Callable[[str, float], float]
    _check_tamper: Callable[[], None]

    def script(self, req: Script) -> dict:
        """The suite's own reference run on a list of cases, in a child that loads nothing else."""
        task = self.task(req.task)
        runner = task.script
        self.start_device()
        module, failed = self._import(for_here(runner.reference_source), "reference")
        if module is None:
            return failed or {}
        entry = runner.reference_entry
        if not hasattr(module, entry):
            return {"stage": "parse", "error": f"module defines no {entry!r}"}
        reply = run_cases(list(req.cases), lambda case: self.run_script_case(task, module, entry, case, True),
                          self._tick)
        if "error" not in reply and req.guard:  # the same draws again, inside guard bands
            reply = guard_reply(reply, req, task, runner.bind(module, entry), self.device)
        if "error" not in reply and req.count:
            try:
                reply["perf_count"] = runner.perf_count
                reply["perf_bytes"] = runner.perf_bytes()
            except BaseException as e:  # noqa: BLE001
                reply["perf_error"] = trim_trace(e)
        return reply

    def run_script_case(self, task: Task, module: ModuleType, entry: str, case: dict, reference: bool) -> dict:
        """One call of `case`. A module's first call of a case's kind (and benchmark input)
        compiles, and may autotune; autotuning re-runs kernels on the call's own buffers, so a
        first call that tuned (or started a library's thread) is dropped and made again. Calls
        that only compiled count as they are: a second call of every case had cost TritonBench
        candidates a full run of the suite's test and of each timed input (H100)."""
        warm = (module.__name__, case["kind"], case["shape"].get("perf"))
        first = warm not in self.warmed
        self.warmed.add(warm)
        t0 = time.perf_counter()
        reply = self._script_call(task, module, entry, case, self._draw(task, case), reference, first)
        if reply is not None:
            return reply
        self._tick("tuned_call", t0)  # a fresh draw: on the CPU the dropped call had the host's tensors themselves
        again = self._script_call(task, module, entry, case, self._draw(task, case), reference, False)
        assert again is not None, "only a first call is made again"
        return again

    def _draw(self, task: Task, case: dict) -> tuple | None:
        if case["kind"] == "test":
            return None
        t0 = time.perf_counter()
        # a timed input's call is only recorded here (its values are never compared): drawn where
        # the timing draws it; the others on the host, as in the reference's child
        device = self.device if case["split"] == "timing" else "cpu"
        try:
            return draw_inputs(task, case, case["seed"], device)
        finally:
            self._tick("inputs", t0)

    def _script_call(self, task: Task, module: ModuleType, entry: str, case: dict, host: tuple | None,
                     reference: bool, first: bool) -> dict | None:
        """The call's reply, or None for a first call to be made again (see run_script_case)."""
        if host is None:
            def call() -> Any:
                return task.script.run_test(module, case["seed"], entry)
            args = None
        else:
            fn = task.script.bind(module, entry)
            args = to_device(host, self.device)

            def call() -> Any:
                return fn(*args)
        threads, tunings = python_threads(), self.hook.tunings
        before = self.hook.launches(module.__name__)
        meter = TorchWorkMeter(self.hook)
        recorder = Recorder(args) if args is not None and not reference else None
        self.hook.recorder = recorder
        seed_all(case["seed"])  # a wrapper that draws random numbers gets the same ones in every run
        try:
            with meter, ZeroedEmpty(), recorder or contextlib.nullcontext():  # recorded: the bound call on `args`
                tree = call()
            if self.device == "cuda":
                torch.cuda.synchronize()
        finally:
            self.hook.recorder = None
        self._check_tamper()
        if first and (self.hook.tunings != tunings or python_threads() != threads):
            return None
        return self._script_reply(module, tree, threads, before, meter, recorder, reference)

    def _script_reply(self, module: ModuleType, tree: Any, threads: int, before: int, meter: TorchWorkMeter,
                      recorder: Recorder | None, reference: bool) -> dict:
        """The early filters for honest mistakes, then the reply (the engine's checks decide)."""
        if python_threads() != threads:
            raise CandidateError("candidate started a thread during the call")
        launches = self.hook.launches(module.__name__) - before
        if not reference and launches == 0:
            raise CandidateError("none of the candidate's own @triton.jit kernels was launched")
        for t in tensors_of(tree):
            if type(t) is not torch.Tensor:
                raise CandidateError(f"the result holds a {type(t).__name__}, not a plain torch.Tensor")
        reply = {"tree": to_wire(tree), "torch_elements": meter.elements, "launches": launches}
        if recorder is not None:
            reply["trace"] = recorder.trace(tensors_of(tree))
        return reply
