"""GEAK's ROCm Triton set: 31 tasks whose tests are pytest files filling a `result_gold` dict.

pytest is not needed (GPU nodes often lack it): the tests run under a small stand-in for the parts
of pytest they use (parametrize, skip, skipif, fixtures by name, `request.node.name`). The
performance tests are AMD's harness and are not run; these tasks are judged on correctness.
"""
from __future__ import annotations

import inspect
import itertools
import json
import sys
import types

from suites.data import suite_dir
from suites.registry import SuiteError, SuiteTasks
from suites.script import (
    GIVEN,
    TOLERANCE,
    ScriptRunner,
    for_here,
    guess_category,
    seed_all,
    split_kernel_file,
    write_temp,
)
from suites.task import ShapeSet, Task

SKIPPED_TESTS = ("test_performance", "test_save")  # benchmarks and result writers, not checks


class Skipped(Exception):
    pass


class _Mark:
    """pytest.mark.<anything>: parametrize is recorded, skipif honoured, the rest ignored."""

    def __getattr__(self, name):
        if name == "parametrize":
            return _parametrize
        if name == "skipif":
            return lambda cond, reason="": (lambda fn: _skip_wrapper(fn, reason) if cond else fn)

        def mark(*args, **kwargs):
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return args[0]
            return lambda fn: fn
        return mark


def _parametrize(names, values, ids=None, **_):
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)

    def deco(fn):
        fn.__dict__.setdefault("_te_params", []).insert(0, (names, list(values)))
        return fn
    return deco


def _skip_wrapper(fn, reason):
    def skipped(*a, **k):
        raise Skipped(reason)
    skipped.__dict__.update(fn.__dict__)
    skipped.__signature__ = inspect.signature(fn)
    return skipped


def _skip(reason="", **_):
    raise Skipped(reason)


def _fail(reason="", **_):
    raise AssertionError(reason)


def _param(*values, **_):
    return values if len(values) != 1 else values[0]


def _fixture(fn):
    fn._te_fixture = True
    return fn


def pytest_shim() -> types.ModuleType:
    m = types.ModuleType("pytest")
    m.mark = _Mark()
    m.skip, m.fail, m.param = _skip, _fail, _param
    m.fixture = lambda *a, **k: _fixture(a[0]) if a and callable(a[0]) else _fixture
    m.skip.Exception = Skipped
    return m


def geak_shim() -> dict[str, types.ModuleType]:
    """The benchmark helpers the tests import; only the performance tests (not run) use them."""
    mods = {}
    for name in ("geak_eval", "geak_eval.perf", "geak_eval.perf.ROCm"):
        mods[name] = types.ModuleType(name)
        mods[name].__path__ = []
    util = types.ModuleType("geak_eval.perf.ROCm.performance_utils_pytest")

    class _Unavailable:
        def __init__(self, *a, **k):
            raise RuntimeError("GEAK's benchmark harness is not part of triton-evolve")
    util.PytestBenchmarker = util.do_bench_config = _Unavailable
    util.save_all_benchmark_results = lambda *a, **k: None
    mods[util.__name__] = util
    return mods


class _Request:
    def __init__(self, name):
        self.node = types.SimpleNamespace(name=name)


def _cases(fn):
    params = fn.__dict__.get("_te_params", [])
    grids = []
    for names, values in params:
        grids.append([dict(zip(names, v if len(names) > 1 else (v,))) for v in values])
    for combo in itertools.product(*grids) if grids else [()]:
        kwargs = {}
        for part in combo:
            kwargs.update(part)
        ident = "-".join(_id(v) for v in kwargs.values())
        yield kwargs, f"{fn.__name__}[{ident}]" if ident else fn.__name__


def _id(v) -> str:
    return str(v).removeprefix("torch.") if isinstance(v, (int, float, str, bool)) or v is None or \
        type(v).__name__ == "dtype" else type(v).__name__


class RocmRunner(ScriptRunner):
    baseline_name = "the suite's reference kernel"

    def __init__(self, name: str, module_code: str, test_code: str, entry: str):
        self.name, self.test_code = name, test_code
        self.reference_source, self.reference_entry = module_code, entry

    def run_test(self, module, seed: int, entry: str):
        code = for_here(self.test_code)
        ns = vars(module)  # as when the tests are appended to the kernel file
        ns.pop("result_gold", None)
        saved = {k: sys.modules.get(k) for k in ("pytest", *geak_shim())}
        sys.modules.update({"pytest": pytest_shim(), **geak_shim()})
        try:
            exec(compile(code, write_temp(f"{self.name}_test.py", code), "exec"), ns)
            fixtures = {k: v for k, v in ns.items() if callable(v) and getattr(v, "_te_fixture", False)}
            for name, fn in list(ns.items()):
                if not (name.startswith("test_") and callable(fn)) or name.startswith(SKIPPED_TESTS):
                    continue
                for kwargs, ident in _cases(fn):
                    sig = inspect.signature(fn).parameters
                    if "request" in sig:
                        kwargs["request"] = _Request(ident)
                    for p in sig:
                        if p not in kwargs and p in fixtures:
                            kwargs[p] = fixtures[p]()
                    seed_all(seed)
                    try:
                        fn(**{k: v for k, v in kwargs.items() if k in sig})
                    except Skipped:
                        continue
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        gold = ns.pop("result_gold", None)
        if not isinstance(gold, dict) or not gold:
            raise RuntimeError("the tests left result_gold empty")
        return gold


def load(path: str | None = None) -> SuiteTasks:
    root = suite_dir("rocm", path)
    tasks = SuiteTasks()
    try:
        records = json.loads((root / "instructions.json").read_text())
        if not isinstance(records, list):
            raise ValueError("expected a list of records")
    except (OSError, ValueError) as e:
        raise SuiteError(f"{root / 'instructions.json'}: {e} (it names each task's kernel)") from None
    for r in records:
        if not isinstance(r, dict) or "file" not in r or "target_kernel_name" not in r:
            tasks.problems.append(f"{root / 'instructions.json'}: a record without file/target_kernel_name: "
                                  f"{str(r)[:80]}")
            continue
        f = root / "kernels" / r["file"]
        try:
            module_code, test_code = split_kernel_file(f, exact=False)
        except SuiteError as e:
            tasks.problems.append(str(e))
            continue
        name = f.stem.removeprefix("test_")
        runner = RocmRunner(name, module_code, test_code, r["target_kernel_name"])
        tasks[name] = Task(
            name=name, suite="rocm", category=guess_category(name), entry=r["target_kernel_name"], reference=None,
            make_inputs=lambda shape, dtype, gen: (), shapes=ShapeSet((), ()), dtypes=(GIVEN,), tolerance=TOLERANCE,
            cost=lambda shape, dtype: (0.0, 0.0), start_source=module_code,
            instruction=str(r.get("instruction", "")).strip(), script=runner,
        )
    return tasks
