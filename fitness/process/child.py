"""A child process: forked from a clean zygote (fitness.process.zygote) for one conversation, then gone.

Which child runs what is the engine's choice: a candidate's child imports the candidate (and
nothing it reports is trusted beyond what the engine can check: its outputs, and the trace of
its device work); a replay child (GPU) loads only recorded kernels, never the candidate's Python;
the baseline child and the reference child load only the suite's own code. Since every child is
fresh, nothing a candidate leaves behind (global torch settings, dispatch modes, library
overrides, patched classes, files) reaches another candidate or the baseline.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from fitness.candidate.harness import (
    CandidateError,
    LaunchHook,
    Snapshot,
    TorchWorkMeter,
    aliases,
    poison,
    python_threads,
    same_storage_bytes,
    storage_copy,
    to_device,
)
from fitness.candidate.recorder import Recorder
from fitness.clean.child_timing import KEEP_SIDES_SHARE, PreparedSides, peaks
from fitness.clean.kernel_source import kernels_from_source
from fitness.clean.replayer import Replayer, ReplayError
from fitness.clean.timing import CAL_DRAWS, TimedSide
from fitness.common.inputs import TORCH_WORK_SHARE, draw_inputs
from fitness.common.messages import (
    BadMessage,
    Import,
    Peaks,
    Ready,
    Replay,
    RunCase,
    Script,
    TaskSpec,
    TimeCheck,
    TimeOpen,
    TimeOracle,
    TimePrepare,
    TimeSets,
    Trial,
    Warm,
    parse_request,
)
from fitness.common.reference import ReferenceSide
from fitness.process import protocol
from fitness.process.child_failures import is_compile_error, is_cuda_fault, trim_trace
from fitness.process.child_script import ScriptSide
from fitness.process.isolation import cap_address_space, outer_pid
from suites.script import for_here, seed_all
from suites.task import Task


class Child(ScriptSide):
    """One conversation's process: it answers the engine's requests (OPS) one at a time."""

    def __init__(self, hook: LaunchHook, snapshot: Snapshot):
        self.interpret = os.environ.get("TRITON_INTERPRET") == "1"
        self.device = os.environ.get("TE_DEVICE", "cpu")
        self.tmp = tempfile.mkdtemp(prefix="te-cand-")
        self.hook, self.snapshot = hook, snapshot
        self.tasks: dict[tuple, Task] = {}
        self._sources: dict[str, dict[str, Any]] = {}  # the candidate's kernels built from its source (one kept)
        self.module: ModuleType | None = None
        self.warmed: set = set()
        self.timing = PreparedSides()  # timed shapes, prepared before the measuring turn
        self.phase_ms: dict[str, float] = {}
        self.started = False
        self.cases_run = 0
        # what answers each request (by its op), given the typed request (fitness.common.messages)
        self.ops: dict[str, Callable[[Any], dict]] = {
            Import.op: self.import_candidate, RunCase.op: self.case, Script.op: self.script, Replay.op: self.replay,
            Warm.op: self.warm, Peaks.op: self.peaks, TimePrepare.op: self.time_prepare,
            TimeOpen.op: self.timing.open, TimeSets.op: self.timing.sets, Trial.op: self.timing.trial,
            TimeCheck.op: self.timing.check, TimeOracle.op: self.timing.oracle,
            **ReferenceSide(self.device, self.task, self.start_device).ops()}  # a reference child's

    def start_device(self) -> None:
        """CUDA starts here, in the child: the zygote never touches it (a forked CUDA context is unusable)."""
        if self.started:
            return
        self.started = True
        t0 = time.perf_counter()
        # the context only: cuBLAS starts where a kernel or reference first needs it (H100: 0.2 s
        # of CPU in every child, and most replay children never call it)
        torch.zeros(1, device=self.device).item()
        if self.device == "cuda":
            torch.cuda.set_per_process_memory_fraction(float(os.environ.get("TE_GPU_MEM_FRACTION", "0.8")))
        self._tick("device_start", t0)
        limit = int(os.environ.get("TE_MEM_LIMIT_BYTES", "0"))
        if limit and self.device == "cpu":
            cap_address_space(limit)  # breaks CUDA, so only on CPU; the engine watches RSS too

    # -- loading -------------------------------------------------------------------------
    def task(self, spec: TaskSpec) -> Task:
        key = (spec["suite"], spec["name"], spec.get("path"))
        if key not in self.tasks:
            from suites.registry import load_task

            self.tasks[key] = load_task(spec["suite"], spec["name"], spec.get("path"))
        return self.tasks[key]

    def load(self, source: str, role: str = "candidate") -> ModuleType:
        name = module_name(source, role)
        if name in sys.modules:  # the baseline child's suite code, once: its compiles and autotuning kept
            return sys.modules[name]
        path = os.path.join(self.tmp, name + ".py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no loader for {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def _import(self, source: str, role: str = "candidate") -> tuple[ModuleType | None, dict | None]:
        """(module, None), or (None, the failed reply) when importing it failed or tampered."""
        t0 = time.perf_counter()
        try:
            module = self.load(source, role)
            self._check_tamper()
            return module, None
        except CandidateError as e:
            return None, {"stage": "parse", "error": str(e)}
        except BaseException as e:  # noqa: BLE001 - any failure to import is the candidate's
            return None, {"stage": "parse", "error": "import failed:\n" + trim_trace(e)}
        finally:
            self._tick("import", t0)

    def _check_tamper(self) -> None:
        what = self.snapshot.changed()
        if what:
            raise CandidateError(f"candidate modified the runtime: {what} was replaced")

    # -- a candidate's correctness, one case per request -----------------------------------
    def import_candidate(self, req: Import) -> dict:
        task = self.task(req.task)
        self.start_device()
        source = for_here(req.source) if task.script is not None else req.source
        module, failed = self._import(source)
        self.module = module
        if module is None:
            return failed or {}
        for name in (e.strip() for e in task.entry.split(",")):
            if not hasattr(module, name):
                return {"stage": "parse", "error": f"module defines no {name!r}"}
        if task.script is None and not callable(getattr(module, task.entry)):
            return {"stage": "parse", "error": f"module defines no callable {task.entry!r}"}
        return {"stage": "call"}

    def case(self, req: RunCase) -> dict:
        task = self.task(req.task)
        case = req.case
        t0 = time.perf_counter()
        try:
            if self.module is None:
                raise CandidateError("no candidate was imported in this child")
            if task.script is not None:
                return self.run_script_case(task, self.module, task.entry, case, False)
            return self.run_case(task, self.module, getattr(self.module, task.entry), case)
        finally:
            # the first case apart: Triton compiles on the first launch
            self._tick("other_cases" if self.cases_run else "first_case", t0)
            self.cases_run += 1

    def run_case(self, task: Task, module: ModuleType, fn: Callable[..., Any], case: dict) -> dict:
        t0 = time.perf_counter()
        args = tuple(to_device(a, self.device) for a in draw_inputs(task, case, case["seed"], self.device))
        saved = [storage_copy(a) if isinstance(a, torch.Tensor) else None for a in args]
        self._tick("inputs", t0)
        threads = python_threads()
        before = self.hook.launches(module.__name__)
        meter = TorchWorkMeter(self.hook)
        recorder = Recorder(args)
        self.hook.recorder = recorder
        try:
            with meter, recorder:
                out = fn(*args)
            if self.device == "cuda":
                torch.cuda.synchronize()  # the device, all streams: work elsewhere still counts as done
        finally:
            self.hook.recorder = None
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if task.inplace:  # the updated inputs are the outputs, whatever the entry returned
            outs = [args[i] for i in task.inplace]
        try:
            self._check_call(task, module, (args, saved), outs, (threads, before), meter)
            trace = recorder.trace(outs)
            t0 = time.perf_counter()
            host = [o.to("cpu", copy=True) for o in outs]  # a copy: the originals get poisoned
            self._tick("to_host", t0)
            return {"outputs": host, "trace": trace}
        finally:
            poison(outs, args, saved)

    def _check_call(self, task: Task, module: ModuleType, inputs: tuple[tuple, list], outs: list,
                    counts_before: tuple[int, int], meter: TorchWorkMeter) -> None:
        """Early filters for honest mistakes (the candidate can defeat any of them; the replay
        and the engine's comparison are what decide). inputs: the call's arguments and their
        saved copies; counts_before: the Python threads and the module's launches before it."""
        args, saved = inputs
        threads, launches_before = counts_before
        self._check_tamper()
        for i, o in enumerate(outs):
            if type(o) is not torch.Tensor:
                raise CandidateError(f"output {i} is a {type(o).__module__}.{type(o).__name__}, "
                                     "not a plain torch.Tensor")
            if not task.inplace and aliases(o, args):
                raise CandidateError(f"output {i} shares memory with an input")
        if python_threads() != threads:
            raise CandidateError("candidate started a thread during the call")
        for k, (a, s) in enumerate(zip(args, saved)):
            if s is not None and k not in task.inplace and not same_storage_bytes(a, s):
                raise CandidateError(f"candidate modified an input tensor (input {k})" + (
                    f" (the task updates only input(s) {', '.join(map(str, task.inplace))} in place)"
                    if task.inplace else " (a task that updates inputs in place says so: INPLACE)"))
        if self.hook.launches(module.__name__) == launches_before:
            raise CandidateError("none of the candidate's own @triton.jit kernels was launched")
        produced = sum(o.numel() for o in outs)
        if not task.torch_ops and meter.elements > max(1024, TORCH_WORK_SHARE * produced):
            ops = ", ".join(f"{k} ({v} elements)" for k, v in sorted(meter.ops.items(), key=lambda kv: -kv[1]))
            raise CandidateError(f"torch did work outside Triton kernels: {ops}")

    # -- replay (a clean child: it never imports the candidate) ------------------------------
    def _from_source(self, task: Task, source: str | None) -> dict[str, Any]:
        """The candidate's @triton.jit kernels built from their own source alone (interpreted under
        the interpreter, compiled on a GPU: fitness.clean.built), once per source in this child;
        ReplayError when the source cannot give them, or none came (fail closed: without it a GPU
        replay would load the binaries the candidate's process recorded)."""
        if source is None:
            raise ReplayError("the engine sent no source to build the candidate's kernels from")
        source = for_here(source) if task.script is not None else source
        if source not in self._sources:
            self._sources = {source: kernels_from_source(source, module_name(source, "candidate"))}
        return self._sources[source]

    def replay(self, req: Replay) -> dict:
        task = self.task(req.task)
        self.start_device()
        try:
            built = self._from_source(task, req.source)
        except ReplayError as e:  # the stage names it a replay's failure
            return {"error": str(e)}
        kernels = built if self.interpret else None
        results = []
        for item in req.items:
            t0 = time.perf_counter()
            try:
                script = task.script is not None
                replayer = Replayer(item.trace, self.device, kernels, task.inplace, destinations=script,
                                    fill="zero" if script else "poison", built=None if self.interpret else built)
                t0 = self._tick("replay_load", t0)
                args = tuple(to_device(a, self.device)
                             for a in draw_inputs(task, item.case, item.case["seed"], self.device))
                t0 = self._tick("replay_inputs", t0)
                if script:  # a wrapper's random draws: the same numbers its reference drew on this case
                    seed_all(item.case["seed"])
                outs = replayer.run(args) if script else replayer.run_guarded(args)
                if self.device == "cuda":
                    torch.cuda.synchronize()
                t0 = self._tick("replay_run", t0)
                results.append({"outputs": [o.to("cpu", copy=True) for o in outs],
                                "torch_elements": replayer.torch_elements, "torch_ops": replayer.torch_ops,
                                "stale_reads": replayer.stale_reads})
            except ReplayError as e:
                results.append({"error": f"replay: {e}"})
            except BaseException as e:  # noqa: BLE001 - a recorded kernel that faults is the candidate's
                results.append({"error": "replay: " + trim_trace(e), "fatal": is_cuda_fault(e)})
            self._tick("replay_to_host", t0)
        return {"results": results}

    # -- timing (clean children: the baseline, or a replayed trace) --------------------------
    def warm(self, req: Warm) -> dict:
        """A spare child starts its device before its conversation is handed out."""
        self.start_device()
        return {"device": self.device_name(), "nice": os.nice(0)}

    def time_prepare(self, req: TimePrepare) -> dict:
        """Everything one timed shape needs that is not measuring (CUDA start, the kernels or
        the baseline loaded, the first draws on the GPU, the rest as the input sets need them):
        the engine asks for it before the measuring turn, so it overlaps another candidate's trials."""
        task = self.task(req.task)
        self.start_device()
        if req.keep_share is not None:
            self.timing.keep_share = min(KEEP_SIDES_SHARE, float(req.keep_share))
        case, seeds = req.case, list(req.seeds)
        t0 = time.perf_counter()

        def fresh(seed: int) -> tuple:  # a trial's fresh draw: copied into its set, so no copy of its own
            return tuple(draw_inputs(task, case, seed, "cuda"))

        def draw(k: int) -> tuple:  # the k-th of the engine's seeds, on the GPU, laid out as the sets are
            return tuple(to_device(a, "cuda") for a in draw_inputs(task, case, seeds[k], "cuda"))
        draws = [draw(k) for k in range(min(CAL_DRAWS, len(seeds)))]  # the rest when the sets need them
        torch.cuda.empty_cache()  # the draws' temporaries: a long-lived baseline child keeps only its sides
        t0 = self._tick("draws", t0)
        cost: Callable[[], list] | None = None
        scratch: Callable[[], list] | None = None
        writes_inputs = False
        if req.trace is not None:
            replayer = Replayer(req.trace, "cuda", inplace=task.inplace, destinations=task.script is not None,
                                fill=None,  # the timing scrambles outputs outside the timed region
                                built=self._from_source(task, req.source))
            self._tick("replay_load", t0)
            scratch, writes_inputs = replayer.scratch, replayer.writes_inputs

            def fn(*args: Any) -> Any:
                return replayer.run(args)
        else:
            fn = self._baseline(task, req.baseline_source)

            def cost() -> list:  # the cost model is suite code: the clean side runs it
                return list(task.cost(case["shape"], case["dtype"]))
        # a destination the call writes is an input: each pass starts from the trial's draws again
        side = TimedSide(fn, draws, len(seeds), draw, fresh, inplace=bool(task.inplace) or writes_inputs,
                         scratch=scratch)
        return self.timing.prepare(str(req.slot), side, cost)

    def _baseline(self, task: Task, baseline_source: str | None) -> Callable[..., Any]:
        if task.script is not None:
            module = self.load(task.script.reference_source, "reference")
            return task.script.bind(module, task.script.reference_entry)
        if baseline_source:
            return getattr(self.load(baseline_source, "baseline"), task.entry)
        return task.reference

    def peaks(self, req: Peaks) -> dict:
        """Measured ceilings: device-to-device copy bandwidth and bf16 matmul rate."""
        self.start_device()
        return peaks()

    # -------------------------------------------------------------------------------------
    def handle(self, wire: dict) -> dict:
        """The reply to one request as it came (a dict): an unknown op or a malformed request is
        answered with an error, as is anything the request's code raises."""
        try:
            req = parse_request(wire)
        except BadMessage as e:
            return {"error": str(e)}
        answer = self.ops.get(req.op)
        if answer is None:  # a request this child's kind does not serve
            return {"error": f"unknown op {req.op!r}"}
        try:
            return answer(req)
        except CandidateError as e:
            return {"stage": "compile", "error": str(e)}
        except BaseException as e:  # noqa: BLE001 - anything the candidate raises is its failure
            stage = "parse" if is_compile_error(e) else "compile"
            return {"stage": stage, "error": trim_trace(e), "fatal": is_cuda_fault(e)}

    def serve(self, fd: int, how: str) -> None:
        protocol.send(fd, Ready(pid=outer_pid(), device=self.device_name(), how=how).to_wire())
        while True:
            try:
                wire = protocol.recv(fd)
            except EOFError:
                return
            self.phase_ms = {}
            t0, tuned = time.perf_counter(), self.hook.tuning_s
            reply = self.handle(wire)
            self._tick("handle", t0)
            if self.hook.tuning_s > tuned:  # the autotuner's benchmarks, within the cases' phases
                self.phase_ms["autotune"] = (self.hook.tuning_s - tuned) * 1e3
            phases = {k: round(v, 2) for k, v in self.phase_ms.items()}
            held = {"gpu_peak": torch.cuda.max_memory_reserved(), "gpu_now": torch.cuda.memory_reserved()} \
                if self.started and self.device == "cuda" else {}
            protocol.send(fd, {**reply, "nonce": wire.get("nonce"), "phase_ms": phases, **held})

    def _tick(self, phase: str, t0: float) -> float:
        """Adds the ms since `t0` to `phase`; returns now (the next phase's start)."""
        now = time.perf_counter()
        self.phase_ms[phase] = self.phase_ms.get(phase, 0.0) + (now - t0) * 1e3
        return now

    def device_name(self) -> str:
        if self.device == "cuda":
            return torch.cuda.get_device_name()
        return "cpu (Triton interpreter)" if self.interpret else "cpu"


def module_name(source: str, role: str = "candidate") -> str:
    """The name a child imports `source` under; a trace names its kernels by it (module:qualname)."""
    return f"{role}_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
