"""A worker process: loads candidate modules and runs them on the task's inputs.

Started by fitness.pool as `python -m fitness.worker IN_FD OUT_FD`, possibly inside bubblewrap.
It answers requests until its input closes. Everything here treats the candidate as hostile:
outputs go back to the engine, which holds the references and decides; the worker only adds
the checks that need to be made next to the call (launches, torch work, aliasing, mutation,
threads, tampering).
"""
from __future__ import annotations

import gc
import hashlib
import importlib.util
import os
import resource
import sys
import tempfile
import time
import traceback

import torch

from fitness import protocol
from fitness.harness import (
    CandidateError,
    InputCache,
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
from suites.script import ZeroedEmpty, for_here, tensors_of, to_wire

# torch compute elements a candidate may produce outside its kernels, as a share of its outputs
TORCH_WORK_SHARE = 0.01
TRACE_CHARS = 4000


def _trim_trace(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= TRACE_CHARS else "...\n" + text[-TRACE_CHARS:]


class Worker:
    def __init__(self):
        self.interpret = os.environ.get("TRITON_INTERPRET") == "1"
        self.device = "cuda" if torch.cuda.is_available() and not self.interpret else "cpu"
        self.tmp = tempfile.mkdtemp(prefix="te-cand-")
        self.modules: dict[str, object] = {}
        self.tasks: dict[tuple, object] = {}
        # half the worker's memory limit, the rest for the candidate: with a quarter (4 GiB) the
        # builtin suite's inputs (5.6 GiB for its two seeds) did not fit, and on the H100 70% of
        # the correctness workers' time went to drawing inputs again, on CPUs they share
        limit = int(os.environ.get("TE_MEM_LIMIT_BYTES", "0")) or (16 << 30)
        self.inputs = InputCache(int(os.environ.get("TE_INPUT_CACHE_BYTES", max(limit // 2, 512 << 20))))
        self._warm_up()
        self.hook = LaunchHook()
        self.hook.install()
        self.snapshot = Snapshot(self.hook)
        self.timer = None
        self.warmed: set = set()  # (module, case kind, benchmark input) already called once
        # torch and Triton are ~10^5 long-lived objects: frozen out of the collector, the full
        # collection after each request (_forget_candidates) scans only what came since (0.1 ms,
        # not 70 ms, on the timing worker's path)
        gc.collect()
        gc.freeze()

    def _warm_up(self):
        # create the lazily started pools and contexts now, so they don't look like the
        # candidate's threads or allocations later
        import torch._dynamo  # noqa: F401 - on import it re-wraps torch functions (manual_seed, ...)

        x = torch.randn(64, 64, device=self.device)
        (x @ x).sum().item()
        if self.device == "cuda":
            frac = float(os.environ.get("TE_GPU_MEM_FRACTION", "0.8"))
            torch.cuda.set_per_process_memory_fraction(frac)
        limit = int(os.environ.get("TE_MEM_LIMIT_BYTES", "0"))
        if limit and self.device == "cpu":
            # address-space cap: breaks CUDA, so only on CPU workers; the engine watches RSS too
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
        """The module for `source`, imported once per role: a candidate identical to the suite's
        reference (validate) still gets a module of its own, so neither sees the state (autotune
        choices, module-level tensors, call counts) that the other's calls left behind."""
        key = f"{role}_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
        if key not in self.modules:
            name = key
            path = os.path.join(self.tmp, name + ".py")
            with open(path, "w") as f:
                f.write(source)
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            self.modules[key] = module
        return self.modules[key]

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

    # -- correctness ----------------------------------------------------------------------
    def correctness(self, req: dict) -> dict:
        task = self.task(req["task"])
        module, failed = self._import(req["source"])
        if failed:
            return failed
        fn = getattr(module, task.entry, None)
        if not callable(fn):
            return {"stage": "parse", "error": f"module defines no callable {task.entry!r}"}
        return _run_cases(req["cases"], lambda case: {"outputs": self.run_case(task, module, fn, case)}, self._tick)

    def run_case(self, task, module, fn, case) -> list:
        t0 = time.perf_counter()
        args = tuple(to_device(a, self.device) for a in self.inputs.get(task, case))
        saved = [storage_copy(a) if isinstance(a, torch.Tensor) else None for a in args]
        self._tick("inputs", t0)
        threads = python_threads()
        before = self.hook.launches(module.__name__)
        meter = TorchWorkMeter(self.hook)
        with meter:
            out = fn(*args)
        if self.device == "cuda":
            torch.cuda.synchronize()  # the device, all streams: work elsewhere still counts as done
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        try:
            self._check_call(module, args, saved, outs, threads, before, meter)
            t0 = time.perf_counter()
            host = [o.to("cpu", copy=True) for o in outs]  # a copy: the originals get poisoned
            self._tick("to_host", t0)
            return host
        finally:
            poison(outs, args, saved)

    def _check_call(self, module, args, saved, outs, threads, launches_before, meter):
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
        """Runs a script task's test (or its call on a benchmark input) for a candidate, or with
        `reference` for the suite's own reference, and returns the result trees."""
        task = self.task(req["task"])
        runner = task.script
        reference = bool(req.get("reference"))
        source = runner.reference_source if reference else req["source"]
        entry = runner.reference_entry if reference else task.entry
        module, failed = self._import(for_here(source), "reference" if reference else "candidate")
        if failed:
            return failed
        if not hasattr(module, entry):
            return {"stage": "parse", "error": f"module defines no {entry!r}"}
        reply = _run_cases(req["cases"], lambda case: self.run_script_case(task, module, entry, case, reference),
                           self._tick)
        if "error" not in reply and req.get("count"):
            try:
                reply["perf_count"] = runner.perf_count
                reply["perf_bytes"] = runner.perf_bytes()
            except BaseException as e:  # noqa: BLE001
                reply["perf_error"] = _trim_trace(e)
        return reply

    def run_script_case(self, task, module, entry, case, reference: bool) -> dict:
        if case["kind"] == "test":
            def call():
                return task.script.run_test(module, case["seed"], entry)
        else:
            args = tuple(to_device(a, self.device) for a in self.inputs.get(task, case))
            fn = task.script.bind(module, entry)

            def call():
                return fn(*to_device(args, self.device))
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
        with meter, ZeroedEmpty():
            tree = call()
        if self.device == "cuda":
            torch.cuda.synchronize()
        self._check_tamper()
        if python_threads() != threads:
            raise CandidateError("candidate started a thread during the call")
        launches = self.hook.launches(module.__name__) - before
        if not reference and launches == 0:
            raise CandidateError("none of the candidate's own @triton.jit kernels was launched")
        for t in tensors_of(tree):
            if type(t) is not torch.Tensor:
                raise CandidateError(f"the result holds a {type(t).__name__}, not a plain torch.Tensor")
        return {"tree": to_wire(tree), "torch_elements": meter.elements, "launches": launches}

    # -- timing --------------------------------------------------------------------------
    def timing(self, req: dict) -> dict:
        from fitness.gpu_timing import Timer

        if self.device != "cuda":
            return {"error": "timing needs a GPU"}
        t0 = time.perf_counter()
        task = self.task(req["task"])
        module = self.load(req["source"])
        if task.script is not None:
            fn = task.script.bind(module, task.entry)
            base = self.load(task.script.reference_source, "reference")
            base_fn = task.script.bind(base, task.script.reference_entry)
        else:
            fn = getattr(module, task.entry)
            base = self.load(req["baseline_source"], "baseline") if req.get("baseline_source") else None
            base_fn = getattr(base, task.entry) if base else task.reference
        if self.timer is None:
            self.timer = Timer()
        peaks = self.timer.peaks()
        setup_ms = round((time.perf_counter() - t0) * 1e3, 2)
        try:
            rows = [self.timer.time_case(task, fn, base_fn, module.__name__, self.hook, self._check_tamper,
                                         case, req.get("trials", 21)) for case in req["cases"]]
        except CandidateError as e:
            return {"error": str(e)}
        except BaseException as e:  # noqa: BLE001
            return {"error": _trim_trace(e), "fatal": _is_cuda_fault(e)}
        return {"rows": rows, "peaks": peaks, "setup_ms": setup_ms}

    def serve(self, fd_in: int, fd_out: int):
        protocol.send(fd_out, {"op": "ready", "pid": os.getpid(), "device": self.device_name(),
                               "interpret": self.interpret})
        while True:
            try:
                req = protocol.recv(fd_in)
            except EOFError:
                gc.unfreeze()  # a clean exit tears the frozen objects down as usual
                return
            op = req.get("op")
            self.phase_ms = {}
            t0 = time.perf_counter()
            if op == "correctness":
                reply = self.correctness(req)
            elif op == "script":
                reply = self.script(req)
            elif op == "timing":
                reply = self.timing(req)
            else:
                reply = {"error": f"unknown op {op!r}"}
            self._tick("handle", t0)
            t0 = time.perf_counter()
            self._forget_candidates()
            self._tick("forget", t0)
            # where a request's time went, for the verdict: what the engine waited for beyond
            # "handle" + "forget" was the queue for a worker and the trip through the pipe
            phases = {k: round(v, 2) for k, v in self.phase_ms.items()}
            protocol.send(fd_out, {**reply, "nonce": req.get("nonce"), "phase_ms": phases})

    def _tick(self, phase: str, t0: float):
        self.phase_ms[phase] = self.phase_ms.get(phase, 0.0) + (time.perf_counter() - t0) * 1e3

    def _forget_candidates(self):
        """Drops the candidates' modules after each request (the suite's reference stays): what
        one candidate allocated at import must not count against the next one's memory."""
        names = [k for k in self.modules if k.startswith("candidate_")]
        if not names:
            return
        for name in names:
            del self.modules[name]
            sys.modules.pop(name, None)
        # Triton keeps every @jit function by "module:name" (recent versions); that alone would
        # keep each module, and everything it allocated, alive
        registry = getattr(sys.modules.get("triton.runtime.jit"), "_triton_jit_function_registry", None)
        if isinstance(registry, dict):
            for key in [k for k in registry if str(k).split(":")[0] in names]:
                del registry[key]
        # the interpreter (CPU) caches each kernel's rewritten function, keyed by the function
        interpreted = getattr(sys.modules.get("triton.runtime.interpreter"), "InterpretedFunction", None)
        rewritten = getattr(interpreted, "rewritten_fn", None)
        if isinstance(rewritten, dict):
            for fn in [f for f in rewritten if getattr(f, "__module__", None) in names]:
                del rewritten[fn]
        self.warmed = {w for w in self.warmed if not w[0].startswith("candidate_")}
        # modules sit in reference cycles (functions point back at their globals); what they held
        # on the GPU goes back to torch's caching allocator, where the next candidate reuses it
        gc.collect()

    def device_name(self) -> str:
        if self.device == "cuda":
            return torch.cuda.get_device_name()
        return "cpu (Triton interpreter)" if self.interpret else "cpu"


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
    # out of memory too: the worker is replaced, so nothing a candidate left allocated or
    # fragmented fails the candidates after it
    return any(s in text for s in ("illegal memory access", "CUDA error", "misaligned address",
                                   "unspecified launch failure", "device-side assert", "CUDA out of memory"))


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
    # the candidate's prints must not reach the channel; fd 1 goes where stderr goes
    os.dup2(2, 1)
    Worker().serve(fd_in, fd_out)


if __name__ == "__main__":
    main()
