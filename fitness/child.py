"""A child process: forked from a clean zygote (fitness.zygote) for one conversation, then gone.

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
import resource
import sys
import tempfile
import time
import traceback
from collections import OrderedDict

import torch

from fitness import protocol
from fitness.harness import (
    CandidateError,
    LaunchHook,
    Snapshot,
    TorchWorkMeter,
    aliases,
    draw_inputs,
    poison,
    python_threads,
    same_storage_bytes,
    storage_copy,
    to_device,
)
from fitness.timing import TimedSide
from fitness.trace import Recorder, Replayer, ReplayError
from suites.script import ZeroedEmpty, for_here, tensors_of, to_wire

# torch work a candidate may do outside its kernels, as a share of its outputs (elements read or
# written by compute ops: a row reduction such as logsumexp writes few elements but reads all)
TORCH_WORK_SHARE = 0.01
TRACE_CHARS = 4000
# GPU memory a timing child keeps in prepared shapes (input sets up to 2 GiB each, fitness.timing),
# as a share of the device's: the baseline child keeps every shape of a search's epoch. H100
# builtin at a fixed 12 GiB: its sides were dropped and prepared again inside the turn (0.2 s of
# the 0.7 s each candidate held it)
KEEP_SIDES_SHARE = 0.3


def _trim_trace(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= TRACE_CHARS else "...\n" + text[-TRACE_CHARS:]


class Child:
    def __init__(self, hook: LaunchHook, snapshot: Snapshot):
        self.interpret = os.environ.get("TRITON_INTERPRET") == "1"
        self.device = os.environ.get("TE_DEVICE", "cpu")
        self.tmp = tempfile.mkdtemp(prefix="te-cand-")
        self.hook, self.snapshot = hook, snapshot
        self.tasks: dict[tuple, object] = {}
        self.module = None
        self.warmed: set = set()
        self.side: TimedSide | None = None  # the shape being measured
        # shapes prepared for a later turn, by slot; the baseline child keeps its sides across
        # candidates (one per shape and epoch of draws), the least recently used dropped past a budget
        self.sides: OrderedDict[str, TimedSide] = OrderedDict()
        self.phase_ms: dict[str, float] = {}
        self.started = False
        self.cases_run = 0

    def start_device(self):
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
            # address-space cap: breaks CUDA, so only on CPU; the engine watches RSS too
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + limit, hard))

    # -- loading -------------------------------------------------------------------------
    def task(self, spec: dict):
        key = (spec["suite"], spec["name"], spec.get("path"))
        if key not in self.tasks:
            from suites.registry import load_task

            self.tasks[key] = load_task(spec["suite"], spec["name"], spec.get("path"))
        return self.tasks[key]

    def load(self, source: str, role: str = "candidate"):
        name = f"{role}_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
        if name in sys.modules:  # the baseline child's suite code, once: its compiles and autotuning kept
            return sys.modules[name]
        path = os.path.join(self.tmp, name + ".py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def _import(self, source: str, role: str = "candidate") -> tuple[object, dict | None]:
        """(module, None), or (None, the failed reply) when importing it failed or tampered."""
        t0 = time.perf_counter()
        try:
            module = self.load(source, role)
            self._check_tamper()
            return module, None
        except CandidateError as e:
            return None, {"stage": "parse", "error": str(e)}
        except BaseException as e:  # noqa: BLE001 - any failure to import is the candidate's
            return None, {"stage": "parse", "error": "import failed:\n" + _trim_trace(e)}
        finally:
            self._tick("import", t0)

    def _check_tamper(self):
        what = self.snapshot.changed()
        if what:
            raise CandidateError(f"candidate modified the runtime: {what} was replaced")

    # -- a candidate's correctness, one case per request -----------------------------------
    def import_candidate(self, req: dict) -> dict:
        task = self.task(req["task"])
        self.start_device()
        source = for_here(req["source"]) if task.script is not None else req["source"]
        self.module, failed = self._import(source)
        if failed:
            return failed
        for name in (e.strip() for e in task.entry.split(",")):
            if not hasattr(self.module, name):
                return {"stage": "parse", "error": f"module defines no {name!r}"}
        if task.script is None and not callable(getattr(self.module, task.entry)):
            return {"stage": "parse", "error": f"module defines no callable {task.entry!r}"}
        return {"stage": "call"}

    def case(self, req: dict) -> dict:
        task = self.task(req["task"])
        case = req["case"]
        t0 = time.perf_counter()
        try:
            if task.script is not None:
                return self.run_script_case(task, self.module, task.entry, case, False)
            return self.run_case(task, self.module, getattr(self.module, task.entry), case)
        finally:
            # the first case apart: Triton compiles on the first launch
            self._tick("other_cases" if self.cases_run else "first_case", t0)
            self.cases_run += 1

    def run_case(self, task, module, fn, case) -> dict:
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
        try:
            self._check_call(module, args, saved, outs, threads, before, meter)
            trace = recorder.trace(outs)
            t0 = time.perf_counter()
            host = [o.to("cpu", copy=True) for o in outs]  # a copy: the originals get poisoned
            self._tick("to_host", t0)
            return {"outputs": host, "trace": trace}
        finally:
            poison(outs, args, saved)

    def _check_call(self, module, args, saved, outs, threads, launches_before, meter):
        """Early filters for honest mistakes (the candidate can defeat any of them; the replay
        and the engine's comparison are what decide)."""
        self._check_tamper()
        for i, o in enumerate(outs):
            if type(o) is not torch.Tensor:
                raise CandidateError(f"output {i} is a {type(o).__module__}.{type(o).__name__}, "
                                     "not a plain torch.Tensor")
            if aliases(o, args):
                raise CandidateError(f"output {i} shares memory with an input")
        if python_threads() != threads:
            raise CandidateError("candidate started a thread during the call")
        for a, s in zip(args, saved):
            if s is not None and not same_storage_bytes(a, s):
                raise CandidateError("candidate modified an input tensor")
        if self.hook.launches(module.__name__) == launches_before:
            raise CandidateError("none of the candidate's own @triton.jit kernels was launched")
        produced = sum(o.numel() for o in outs)
        if meter.elements > max(1024, TORCH_WORK_SHARE * produced):
            ops = ", ".join(f"{k} ({v} elements)" for k, v in sorted(meter.ops.items(), key=lambda kv: -kv[1]))
            raise CandidateError(f"torch did work outside Triton kernels: {ops}")

    # -- script tasks (data-backed suites) -------------------------------------------------
    def script(self, req: dict) -> dict:
        """The suite's own reference run on a list of cases, in a child that loads nothing else."""
        task = self.task(req["task"])
        runner = task.script
        self.start_device()
        module, failed = self._import(for_here(runner.reference_source), "reference")
        if failed:
            return failed
        entry = runner.reference_entry
        if not hasattr(module, entry):
            return {"stage": "parse", "error": f"module defines no {entry!r}"}
        reply = _run_cases(req["cases"], lambda case: self.run_script_case(task, module, entry, case, True),
                           self._tick)
        if "error" not in reply and req.get("count"):
            try:
                reply["perf_count"] = runner.perf_count
                reply["perf_bytes"] = runner.perf_bytes()
            except BaseException as e:  # noqa: BLE001
                reply["perf_error"] = _trim_trace(e)
        return reply

    def run_script_case(self, task, module, entry, case, reference: bool) -> dict:
        args = None
        if case["kind"] == "test":
            def call():
                return task.script.run_test(module, case["seed"], entry)
        else:
            host = draw_inputs(task, case, case["seed"])
            fn = task.script.bind(module, entry)
            args = to_device(host, self.device)

            def call():
                return fn(*to_device(host, self.device))
        warm = (module.__name__, case["kind"], case["shape"].get("perf"))
        if warm not in self.warmed:
            # a first call autotunes and compiles; autotuning re-runs kernels on the call's own
            # buffers, so only a later call's result is comparable between two modules
            with ZeroedEmpty():
                call()
            self.warmed.add(warm)
        threads = python_threads()
        before = self.hook.launches(module.__name__)
        meter = TorchWorkMeter(self.hook)
        recorder = Recorder(args) if args is not None and not reference else None
        self.hook.recorder = recorder
        try:
            with meter, ZeroedEmpty():
                if recorder is not None:
                    with recorder:
                        tree = fn(*args)
                else:
                    tree = call()
            if self.device == "cuda":
                torch.cuda.synchronize()
        finally:
            self.hook.recorder = None
        self._check_tamper()
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

    # -- replay (a clean child: on a GPU it never imports the candidate) ---------------------
    def replay(self, req: dict) -> dict:
        task = self.task(req["task"])
        self.start_device()
        module = None
        if self.interpret:  # interpreted kernels are Python: the module is needed to launch them
            module, failed = self._import(for_here(req["source"]) if task.script is not None else req["source"])
            if failed:
                return failed
        results = []
        for item in req["items"]:
            t0 = time.perf_counter()
            try:
                replayer = Replayer(item["trace"], self.device, module)
                t0 = self._tick("replay_load", t0)
                args = tuple(to_device(a, self.device)
                             for a in draw_inputs(task, item["case"], item["case"]["seed"], self.device))
                t0 = self._tick("replay_inputs", t0)
                outs = replayer.run(args)
                if self.device == "cuda":
                    torch.cuda.synchronize()
                t0 = self._tick("replay_run", t0)
                results.append({"outputs": [o.to("cpu", copy=True) for o in outs],
                                "torch_elements": replayer.torch_elements, "torch_ops": replayer.torch_ops})
            except ReplayError as e:
                results.append({"error": f"replay: {e}"})
            except BaseException as e:  # noqa: BLE001 - a recorded kernel that faults is the candidate's
                results.append({"error": "replay: " + _trim_trace(e), "fatal": _is_cuda_fault(e)})
            self._tick("replay_to_host", t0)
        return {"results": results}

    # -- timing (clean children: the baseline, or a replayed trace) --------------------------
    def warm(self, req: dict) -> dict:
        """A spare child starts its device before its conversation is handed out."""
        self.start_device()
        return {"device": self.device_name(), "nice": os.nice(0)}

    def time_prepare(self, req: dict) -> dict:
        """Everything one timed shape needs that is not measuring (CUDA start, the kernels or
        the baseline loaded, the three draws on the GPU): the engine asks for it before the
        measuring turn, so it overlaps another candidate's trials."""
        task = self.task(req["task"])
        self.start_device()
        case = req["case"]
        draws = [tuple(to_device(a, "cuda") for a in draw_inputs(task, case, s, "cuda")) for s in req["seeds"]]
        if req.get("trace") is not None:
            replayer = Replayer(req["trace"], "cuda")

            def fn(*args):
                return replayer.run(args)
        else:
            fn = self._baseline(task, req.get("baseline_source"))
        side = TimedSide(fn, draws)
        reply = side.calibrate()  # warm-up (launcher, module load) and the time of one call
        if req.get("trace") is None:  # the cost model is suite code: the clean side runs it
            reply["cost"] = list(task.cost(case["shape"], case["dtype"]))
        side.cal = reply
        self.sides[str(req["slot"])] = side
        self._trim(str(req["slot"]))
        return reply

    def _trim(self, keep: str):
        """Least recently used sides dropped (never `keep`) until the kept ones fit the budget."""
        total = sum(s.nbytes() for s in self.sides.values())
        budget = KEEP_SIDES_SHARE * torch.cuda.get_device_properties(0).total_memory
        for slot in [k for k in self.sides if k != keep]:
            if total <= budget:
                break
            total -= self.sides.pop(slot).nbytes()

    def time_open(self, req: dict) -> dict:
        """The measuring turn begins on a prepared slot: what it holds, or that it is gone."""
        slot = str(req["slot"])
        if slot not in self.sides:
            return {"missing": True}
        self.sides.move_to_end(slot)
        self.side = self.sides[slot]
        return {"cal": self.side.cal, "method": self.side.method, "n_sets": len(self.side.sets)}

    def peaks(self, req: dict) -> dict:
        """Measured ceilings: device-to-device copy bandwidth and bf16 matmul rate."""
        self.start_device()
        n = 1 << 28  # 1 GiB of float32
        src = torch.randn(n, device="cuda")
        dst = torch.empty_like(src)
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        t_copy, t_mm = _median_ms(lambda: dst.copy_(src)), _median_ms(lambda: a @ a)
        return {"bandwidth_Bps": 2 * n * 4 / (t_copy * 1e-3), "flops": 2 * 8192 ** 3 / (t_mm * 1e-3),
                "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size, "device": torch.cuda.get_device_name()}

    def _baseline(self, task, baseline_source: str | None):
        if task.script is not None:
            module = self.load(task.script.reference_source, "reference")
            return task.script.bind(module, task.script.reference_entry)
        if baseline_source:
            return getattr(self.load(baseline_source, "baseline"), task.entry)
        return task.reference

    def time_sets(self, req: dict) -> dict:
        """The input sets and (graph) the captured region of a prepared slot."""
        method = self.sides[str(req["slot"])].prepare(int(req["n_sets"]), bool(req.get("graph", True)))
        self._trim(str(req["slot"]))
        return {"method": method}

    def trial(self, req: dict) -> dict:
        """`reps` timed regions back to back (draws k, k+1, ...): one round trip for several."""
        k, passes = int(req["k"]), int(req.get("passes", 1))
        return {"ms": [self.side.trial(k + j, passes) for j in range(max(1, int(req.get("reps", 1))))]}

    def time_check(self, req: dict) -> dict:
        """Outputs of the picked sets on the third draw; `drop`: the slot is done with."""
        slot = str(req["slot"])
        outs = self.sides[slot].check([int(i) for i in req["picks"]])
        if req.get("drop", True):
            del self.sides[slot]
        return {"outputs": [to_wire(o) for o in outs]}

    # -------------------------------------------------------------------------------------
    OPS = {"import": "import_candidate", "case": "case", "script": "script", "replay": "replay",
           "time_prepare": "time_prepare", "time_open": "time_open", "time_sets": "time_sets", "trial": "trial",
           "time_check": "time_check", "peaks": "peaks", "warm": "warm"}

    def handle(self, req: dict) -> dict:
        method = self.OPS.get(req.get("op"))
        if method is None:
            return {"error": f"unknown op {req.get('op')!r}"}
        try:
            return getattr(self, method)(req)
        except CandidateError as e:
            return {"stage": "compile", "error": str(e)}
        except BaseException as e:  # noqa: BLE001 - anything the candidate raises is its failure
            stage = "parse" if _is_compile_error(e) else "compile"
            return {"stage": stage, "error": _trim_trace(e), "fatal": _is_cuda_fault(e)}

    def serve(self, fd: int, how: str):
        protocol.send(fd, {"op": "ready", "pid": _outer_pid(), "device": self.device_name(), "how": how})
        while True:
            try:
                req = protocol.recv(fd)
            except EOFError:
                return
            self.phase_ms = {}
            t0 = time.perf_counter()
            reply = self.handle(req)
            self._tick("handle", t0)
            phases = {k: round(v, 2) for k, v in self.phase_ms.items()}
            protocol.send(fd, {**reply, "nonce": req.get("nonce"), "phase_ms": phases})

    def _tick(self, phase: str, t0: float) -> float:
        """Adds the ms since `t0` to `phase`; returns now (the next phase's start)."""
        now = time.perf_counter()
        self.phase_ms[phase] = self.phase_ms.get(phase, 0.0) + (now - t0) * 1e3
        return now

    def device_name(self) -> str:
        if self.device == "cuda":
            return torch.cuda.get_device_name()
        return "cpu (Triton interpreter)" if self.interpret else "cpu"


def _median_ms(fn, reps: int = 10) -> float:
    fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def _outer_pid() -> int:
    """This process's pid as the engine sees it (in a PID namespace of its own it is 1 here)."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def _run_cases(cases: list[dict], run, tick) -> dict:
    """Each case's result until one fails; the reply says which, at which stage, and why.
    `tick(phase, t0)`: the first case's time (Triton compiles on the first launch) apart."""
    results = []
    for i, case in enumerate(cases):
        t0 = time.perf_counter()
        try:
            results.append(run(case))
        except CandidateError as e:
            return {"stage": "compile", "error": str(e), "results": results, "case": case}
        except BaseException as e:  # noqa: BLE001 - anything the candidate raises is its failure
            stage = "parse" if _is_compile_error(e) and not results else "compile"
            return {"stage": stage, "error": _trim_trace(e), "results": results, "case": case,
                    "fatal": _is_cuda_fault(e)}
        finally:
            tick("first_case" if i == 0 else "other_cases", t0)
    return {"stage": "call", "results": results}


def _is_compile_error(e: BaseException) -> bool:
    return type(e).__module__.startswith("triton.compiler") or "CompilationError" in type(e).__name__


def _is_cuda_fault(e: BaseException) -> bool:
    text = str(e)
    return any(s in text for s in ("illegal memory access", "CUDA error", "misaligned address",
                                   "unspecified launch failure", "device-side assert", "CUDA out of memory"))


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0
