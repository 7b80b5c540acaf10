"""KernelBench levels 1-3 (100 + 100 + 50 tasks): PyTorch `Model`s to be rewritten as `ModelNew`
with Triton kernels.

A candidate module defines `ModelNew` with `Model`'s constructor and forward. Both are built under
the same seed (so parameters created in the same order match, as in KernelBench's own harness),
fed `get_inputs()` of the task file, and compared; the baseline is the PyTorch eager `Model`.
There is no Triton starting kernel: these tasks need the LLM operators to start a population.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from suites.data import suite_dir
from suites.registry import SuiteError, SuiteTasks
from suites.script import GIVEN, TOLERANCE, ScriptRunner, guess_category, interpreting, seed_all
from suites.task import ShapeSet, Task, to_device

LEVELS = (1, 2, 3)
# KernelBench's own bar (atol = rtol = 1e-2), here with atol scaled by the output's magnitude
KB_TOLERANCE = {**TOLERANCE, "float32": (1e-2, 1e-2)}
WEIGHT_SEED = 42  # the models timed are built once, with this seed


def _device() -> str:
    return "cuda" if torch.cuda.is_available() and not interpreting() else "cpu"


class KernelBenchRunner(ScriptRunner):
    torch_work_relative = False  # partial rewrites are allowed: torch's share is reported, not refused
    reference_entry = "Model"
    baseline_name = "PyTorch eager (the Model)"
    perf_count = 1

    def __init__(self, name: str, path: Path, source: str):
        self.name, self.path, self.reference_source = name, path, source
        self._ns: dict | None = None
        self._models: dict[str, torch.nn.Module] = {}

    def _reference(self) -> dict:
        """The task file's namespace: get_inputs, get_init_inputs and the size constants."""
        if self._ns is None:
            ns = {"__name__": f"kernelbench_{self.name}"}
            exec(compile(self.reference_source, str(self.path), "exec"), ns)
            self._ns = ns
        return self._ns

    def _build(self, module, entry: str, seed: int) -> torch.nn.Module:
        ref = self._reference()
        seed_all(seed)
        init = ref["get_init_inputs"]()
        seed_all(seed)
        return getattr(module, entry)(*init).to(_device()).eval()

    def run_test(self, module, seed: int, entry: str):
        model = self._build(module, entry, seed)
        args = to_device(tuple(self.perf_args(0, seed)), _device())
        with torch.no_grad():
            return model(*args)

    def perf_args(self, index: int, seed: int) -> tuple:
        seed_all(seed + 1)  # inputs drawn apart from the weights
        return tuple(self._reference()["get_inputs"]())

    def bind(self, module, entry: str):
        key = f"{module.__name__}.{entry}"
        if key not in self._models:
            self._models[key] = self._build(module, entry, WEIGHT_SEED)
        model = self._models[key]

        def call(*args):
            with torch.no_grad():
                return model(*args)
        return call


def _instruction(source: str) -> str:
    return ("Write `ModelNew`, a drop-in replacement for `Model` below (same constructor arguments and forward "
            "signature, parameters created in the same order), whose forward computes the same outputs with custom "
            "Triton kernels (@triton.jit) launched from Python.\n\n" + source)


def load(path: str | None = None) -> SuiteTasks:
    root = suite_dir("kernelbench", path)
    tasks = SuiteTasks()
    for level in LEVELS:
        folder = root / f"level{level}"
        files = sorted(folder.glob("*.py"), key=lambda f: (int(m.group(1)) if (m := re.match(r"(\d+)_", f.name))
                                                          else 10**6, f.name))
        if not files:
            tasks.problems.append(f"{folder}: no task files")
        for f in files:
            try:
                source = f.read_text()
                if "class Model" not in source or "def get_inputs" not in source:
                    raise SuiteError(f"{f}: not a KernelBench task (no `class Model` or `get_inputs`)")
                compile(source, str(f), "exec")
            except (OSError, UnicodeDecodeError, SyntaxError) as e:
                tasks.problems.append(f"{f}: cannot read ({e})")
                continue
            except SuiteError as e:
                tasks.problems.append(str(e))
                continue
            name = f"L{level}_{f.stem}"
            runner = KernelBenchRunner(name, f, source)
            tasks[name] = Task(
                name=name, suite="kernelbench", category=guess_category(f.stem.split("_", 1)[-1]), entry="ModelNew",
                reference=None, make_inputs=lambda shape, dtype, gen, r=runner: r.perf_args(0, gen.initial_seed()),
                shapes=ShapeSet((), ()), dtypes=(GIVEN,), tolerance=KB_TOLERANCE,
                cost=lambda shape, dtype: (0.0, 0.0), start_source="", instruction=_instruction(source),
                difficulty=level, script=runner, device_inputs=True,
            )
    if not tasks:
        raise SuiteError(f"{root}: no KernelBench tasks found (" + "; ".join(tasks.problems[:3]) + ")")
    return tasks
