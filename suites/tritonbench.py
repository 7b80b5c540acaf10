"""TritonBench-G as revised for GEAK: 184 tasks, each a reference Triton module and its test.

Per task: the reference (the code before the 146-'#' line) is the starting kernel; the test (after
it) fills `result_gold`; instructions.json gives the instruction and difficulty; perf/<name>_perf.py
gives the benchmark inputs (`get_input_tensors`), the call (`call_op`) and the GB/s and TFLOP/s
formulas. A candidate is a module defining the same functions as the reference.
"""
from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path

import torch

from suites.ast_lock import parse
from suites.data import suite_dir
from suites.lru import BytesLRU
from suites.registry import SuiteError, SuiteTasks
from suites.script import (
    GIVEN,
    TOLERANCE,
    LazyFactories,
    ScriptRunner,
    for_here,
    guess_category,
    seed_all,
    split_kernel_file,
    tensors_of,
    write_temp,
)
from suites.task import ShapeSet, Task, nbytes

PACKAGE = "TritonBench_v1"  # what the perf files import the kernel module as
# Whole draws of a perf file without a layout kept per child: the timing's three draws of an
# epoch, while they hold this much in all (a larger one is not kept: only the input asked for)
WHOLE_DRAWS_KEPT = 3
WHOLE_DRAW_BYTES = 2 << 30


def perf_imports(perf_source: str, name: str, path: Path) -> list[str]:
    """The names a perf file imports from the task's module (the first is the entry point)."""
    try:
        tree = parse(perf_source)
    except SyntaxError as e:
        raise SuiteError(f"{path}: does not parse ({e.msg}, line {e.lineno})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == f"{PACKAGE}.{name}":
            return [a.name for a in node.names]
    raise SuiteError(f"{path}: no `from {PACKAGE}.{name} import ...` line")


class TritonBenchRunner(ScriptRunner):
    baseline_name = "the suite's reference kernel"

    def __init__(self, name: str, module_code: str, test_code: str, perf_path: Path, entries: list[str]):
        self.name, self.test_code, self.perf_path, self.entries = name, test_code, perf_path, entries
        self.reference_source, self.reference_entry = module_code, entries[0]
        self._compiled = None
        self._perf_classes: dict[str, type] = {}
        self._layout: list | None = None
        self._ref_module = None
        self._item: tuple | None = None  # ((index, seed, device), the input) of the last draw
        # whole draws of a perf file without a layout, by (seed, device)
        self._whole = BytesLRU(WHOLE_DRAW_BYTES, lambda items: nbytes(tensors_of(items)), WHOLE_DRAWS_KEPT)
        # a whole draw over that budget, made for the layout: handed once to the item() that
        # follows, instead of drawn again (30 s a draw, seen on the H100)
        self._handoff: tuple | None = None
        self.packed = True

    def run_test(self, module, seed: int, entry: str):
        if self._compiled is None:
            code = for_here(self.test_code)
            self._compiled = compile(code, write_temp(f"{self.name}_test.py", code), "exec")  # @jit needs a file
        # in the module's own namespace, as when the test is appended to the kernel file (GEAK's
        # way): some references use names that only the test imports
        ns = vars(module)
        ns.pop("result_gold", None)
        seed_all(seed)
        exec(self._compiled, ns)
        if "result_gold" not in ns:
            raise RuntimeError("the test code left no result_gold")
        return ns.pop("result_gold")

    # -- the perf file ------------------------------------------------------------------------
    def _perf_class(self, module) -> type:
        """The perf file's class, executed with `from TritonBench_v1.<name> import f` bound to
        `module`: one copy per module, so the candidate and the baseline never share globals."""
        key = getattr(module, "__name__", "none")
        if key not in self._perf_classes:
            source = for_here(self.perf_path.read_text())
            pkg = sys.modules.setdefault(PACKAGE, types.ModuleType(PACKAGE))
            pkg.__path__ = []
            perf_dir = str(self.perf_path.parent)
            if perf_dir not in sys.path:
                sys.path.append(perf_dir)  # for `from performance_utils import ...`
            sys.modules[f"{PACKAGE}.{self.name}"] = module
            ns = {"__name__": f"{self.name}_perf_{key}", "__file__": str(self.perf_path)}
            try:
                exec(compile(source, str(self.perf_path), "exec"), ns)
            except Exception as e:
                raise RuntimeError(f"{self.perf_path} failed to import: {type(e).__name__}: {e}") from e
            finally:
                sys.modules.pop(f"{PACKAGE}.{self.name}", None)
            cls = ns.get("performance_metrics")
            if not isinstance(cls, type):
                raise RuntimeError(f"{self.perf_path} defines no class performance_metrics")
            self._perf_classes[key] = cls
        return self._perf_classes[key]

    def _input_module(self):
        """The reference module, for perf files whose input makers call the task's own helpers
        (a quantizer, say); loaded once, in the worker."""
        if self._ref_module is None:
            import importlib.util

            source = for_here(self.reference_source)
            name = f"{self.name}_inputs"
            path = write_temp(name + ".py", source)  # @triton.jit needs a file
            spec = importlib.util.spec_from_file_location(name, path)
            m = importlib.util.module_from_spec(spec)
            sys.modules[name] = m
            spec.loader.exec_module(m)
            self._ref_module = m
        return self._ref_module

    def _draw(self, seed: int, wanted: set | None):
        perf = self._perf_class(self._input_module())()
        seed_all(seed)
        with LazyFactories(wanted) as lazy:
            perf.get_input_tensors()
        items = list(perf.input_tensors)
        if not items:
            raise RuntimeError(f"{self.perf_path}: get_input_tensors made no inputs")
        self.packed = isinstance(items[0], (tuple, list))
        return items, lazy

    def layout(self, seed: int = 0) -> list:
        """The inputs as meta tensors (no memory, no time) and which factory calls made each;
        where the perf file cannot build them as meta tensors, the real ones of `seed`'s whole
        draw, kept as that draw: the first input a child asks for is then its only draw (a
        quantizing perf file took 30 s a draw on the H100 beside 8 workers)."""
        if self._layout is None:
            device = torch.get_default_device()  # the key item() will look the draw up by
            try:
                with torch.device("cpu"):
                    items, lazy = self._draw(0, wanted=set())
                self._layout = [(item, lazy.origins(item)) for item in items]
            except Exception:  # noqa: BLE001 - e.g. an input maker that launches a kernel
                items = self._whole_draw((seed, device))
                if (seed, device) not in self._whole:
                    self._handoff = ((seed, device), items)  # the layout holds them anyway
                self._layout = [(item, None) for item in items]
        return self._layout

    def item(self, index: int, seed: int):
        """One benchmark input, real: only the factory calls that make it draw data, so a perf
        file that builds 20 GB of inputs costs the memory of the one asked for."""
        key = (index, seed, torch.get_default_device())  # drawn on the host, or the device's default
        if self._item is None or self._item[0] != key:
            self._item = None
            wanted = self.layout(seed)[index][1]
            items = self._whole_draw(key[1:]) if wanted is None else self._draw(seed, wanted)[0]
            self._item = (key, items[index])
        return self._item[1]

    def _whole_draw(self, key: tuple) -> list:
        """Every input of one seed, for a perf file without a layout (meta tensors failed): it
        makes them all at each draw, so a draw is kept for the other shapes asked of the same seed
        (fitness.engine.measuring gives a task's shapes the same seeds) while the kept ones are small.
        Made on the host, as the layout was: on the device a suite's 20 GB of inputs stayed in a
        long-lived child's allocator."""
        if key in self._whole:
            return self._whole.get(key)
        if self._handoff is not None and self._handoff[0] == key:
            items, self._handoff = self._handoff[1], None
            return items
        with torch.device("cpu"):
            items, _ = self._draw(key[0], None)
        if self._whole.size(items) <= self._whole.max_bytes:  # one over the budget alone: not kept, and evicts none
            self._whole.put(key, items)
        return items

    @property
    def perf_count(self) -> int:
        return len(self.layout())

    def perf_bytes(self) -> list[int]:
        return [sum(t.numel() * t.element_size() for t in tensors_of(item)) for item, _ in self.layout()]

    def perf_args(self, index: int, seed: int) -> tuple:
        item = self.item(index, seed)
        return tuple(item) if isinstance(item, (tuple, list)) else (item,)

    def bind(self, module, entry: str):
        perf = self._perf_class(module)()

        def call(*args):
            out = perf.call_op(args if self.packed else args[0])
            # call_op of an in-place kernel returns nothing: its result is its inputs
            return out if out is not None else args
        return call

    def cost(self, index: int, seed: int) -> tuple[float, float]:
        """(bytes, flops) from the perf file's formulas: their rate at a runtime of 1000 ms."""
        perf = self._perf_class(self._input_module())()
        item = self.layout()[index][0]  # meta tensors: the formulas need sizes, not data
        values = []
        for method, unit in (("get_gbps", 1e9), ("get_tflops", 1e12)):
            try:
                values.append(float(getattr(perf, method)(item, 1000.0)) * unit)
            except Exception:  # noqa: BLE001 - a formula that fails leaves the roofline unknown
                values.append(0.0)
        return values[0], values[1]


def _make_inputs(runner):
    return lambda shape, dtype, gen: runner.perf_args(shape["perf"], gen.initial_seed())


def _cost(runner):
    return lambda shape, dtype: runner.cost(shape["perf"], 0)


def build_task(name: str, kernel_path: Path, perf_path: Path, record: dict) -> Task:
    module_code, test_code = split_kernel_file(kernel_path)
    if not perf_path.exists():
        raise SuiteError(f"{perf_path}: missing (the task's benchmark inputs)")
    entries = perf_imports(perf_path.read_text(), name, perf_path)
    runner = TritonBenchRunner(name, module_code, test_code, perf_path, entries)
    difficulty = record.get("difficulty")
    return Task(
        name=name, suite="tritonbench", category=guess_category(name), entry=entries[0], reference=None,
        make_inputs=_make_inputs(runner), shapes=ShapeSet((), ()), dtypes=(GIVEN,), tolerance=TOLERANCE,
        cost=_cost(runner), start_source=module_code, instruction=str(record.get("instruction", "")).strip(),
        difficulty=int(difficulty) if str(difficulty).isdigit() else None, script=runner, device_inputs=True,
    )


def read_records(path: Path, problems: list[str]) -> dict[str, dict]:
    """instructions.json by kernel file; a bad file is reported and the tasks load without it."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, list):
            raise ValueError("expected a list of records")
        return {r["file"]: r for r in data if isinstance(r, dict) and "file" in r}
    except (OSError, ValueError) as e:
        problems.append(f"{path}: {e}; tasks load without instructions and difficulty")
        return {}


def load(path: str | None = None) -> SuiteTasks:
    root = suite_dir("tritonbench", path)
    tasks = SuiteTasks()
    records = read_records(root / "instructions.json", tasks.problems)
    kernels = sorted((root / "kernels").glob("*.py"))
    if not kernels:
        raise SuiteError(f"{root / 'kernels'}: no kernel files")
    for f in kernels:
        try:
            task = build_task(f.stem, f, root / "perf" / f"{f.stem}_perf.py", records.get(f.name, {}))
        except SuiteError as e:
            tasks.problems.append(str(e))
            continue
        tasks[task.name] = task
    if not tasks:
        raise SuiteError(f"{root}: no task could be loaded (" + "; ".join(tasks.problems[:2]) + ")")
    return tasks
