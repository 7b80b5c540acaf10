"""Your own tasks: `--suite PATH`, a task file or a folder of them (`run.py new-task NAME` writes
a commented one; suites/template_task.py is that template).

A task file is a Python module that defines, at top level:

    ENTRY         the name of the function the kernel module defines (and candidates must too)
    reference     reference(*inputs) -> tensor(s), in plain torch (it also runs on float64 copies:
                  the correctness oracle)
    make_inputs   make_inputs(shape, dtype, gen) -> tuple of CPU tensors / scalars in the order
                  ENTRY takes them; draw every random number from the torch.Generator `gen`
    SHAPES        {"tuning": [shape, ...], "heldout": [shape, ...]}; a shape is a dict of
                  upper-case sizes ({"M": 4096, "N": 1000}); held-out shapes are drawn afresh at
                  each evaluation between the smallest and largest sizes given (suites.task.draw_shapes)
    DTYPES        torch dtype names, e.g. ["float32"] or ["float16", "bfloat16"]
    START         the starting Triton kernel: the source of a module defining ENTRY, as a string,
    or START_FILE a path to that module, relative to the task file

and optionally:

    NAME          the task's name (default: the file's name)
    CPU_SHAPES    smaller shapes for the Triton interpreter on CPU, same form as SHAPES
    TOLERANCE     per output dtype, (atol, rtol): |out - ref| <= atol + rtol * |ref| passes (over
                  DEFAULT_TOLERANCE); or whole-tensor metrics, for quantization, {metric: bound}
                  for every output or per dtype ({"float16": {"cosine": 0.999}}): cosine >= bound;
                  rel_l1, rmse, rel_rmse, max_abs <= bound (fitness.common.metric_tolerance)
    INPLACE       positions of the inputs ENTRY updates in place, e.g. (0,): the updated inputs
                  are then the outputs compared (the reference updates them too, and may return
                  nothing); any other input a candidate changes fails it
    TORCH_OPS     "allowed": torch work around the Triton kernels is part of the kernel and timed
                  with it; "counted" (the default): the kernels must do the work (torch work
                  beyond 1% of the outputs fails a candidate)
    NON_SIZE_KEYS lower-case shape keys that may hold integers without being sizes, e.g.
                  ("causal",): held-out draws vary only upper-case sizes, so an integer under
                  any other lower-case key is refused
    VARIANTS      the input distributions checked beside the task's own: a tuple of "scaled" (x16),
                  "offset" (+64), "extreme" (outliers x256); default ("scaled", "offset"), () for none
    cost          cost(shape, dtype) -> (bytes moved, flops): the roofline floor (without it none)
    CATEGORY, INSTRUCTION (what the LLM operators are told), DIFFICULTY

A folder suite is every *.py file directly in it, except names starting with "_" and the files
some task names as its START_FILE. The suite's name is the file's or folder's absolute path: the
archive keeps it, and the evaluator's workers load the task from it again (suites.task).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from fitness.common.metric_tolerance import METRICS, parse_metrics
from suites.ast_lock import parse
from suites.registry import SuiteError, SuiteTasks, suite_names
from suites.task import VARIANTS, ShapeSet, Task
from suites.user_checks import check_runs as check_runs

# an element passes when |out - ref| <= atol + rtol * |ref|; TOLERANCE entries replace these
DEFAULT_TOLERANCE = {
    "float64": (1e-7, 1e-7), "float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2),
    **{t: (0.0, 0.0) for t in ("int8", "uint8", "int16", "int32", "int64", "bool")},
}
TEMPLATE = Path(__file__).with_name("template_task.py")
TEMPLATE_NAME = "scale_add"  # the template's task and entry name, replaced by new-task's NAME


def looks_like_path(name: str) -> bool:
    """A --suite value that names a file or folder rather than a registered suite (whose names
    win over a folder of the same name)."""
    return name not in suite_names() and (os.path.exists(name) or name.endswith(".py") or os.sep in name)


def suite_label(suite: str) -> str:
    """A short name for file names (runs/<label>.db): a path suite's file or folder name and a
    digest of its absolute path, so two folders named `tasks` keep two records and archives."""
    if not looks_like_path(suite):
        return suite
    where = str(Path(suite).resolve())
    return f"{Path(suite).stem}-{hashlib.sha256(where.encode()).hexdigest()[:8]}"


def visible_paths(suite: str) -> tuple[str, ...]:
    """What the evaluator's sandboxed workers must see to load the suite again: the folder (a
    file's folder too), the file itself in case that folder is /tmp, and every START_FILE."""
    p = Path(suite).resolve()
    files = sorted(p.glob("*.py")) if p.is_dir() else [p]
    kernels = [str(k) for f in files for k in _start_files(f)]
    return tuple(dict.fromkeys([str(p)] if p.is_dir() else [str(p.parent), str(p)]) | dict.fromkeys(kernels))


def load(path: str) -> SuiteTasks:
    root = Path(path)
    if not root.exists():
        raise SuiteError(f"{path}: no such task file or folder")
    if root.is_file():
        task = load_file(root)
        return SuiteTasks({task.name: task})
    return _load_folder(root)


def _load_folder(root: Path) -> SuiteTasks:
    files = sorted(f for f in root.glob("*.py") if not f.name.startswith("_"))
    kernels = {k for f in files for k in _start_files(f)}
    tasks = SuiteTasks()
    for f in files:
        if f.resolve() in kernels:
            continue
        try:
            task = load_file(f, str(root.resolve()))
        except SuiteError as e:
            tasks.problems.append(str(e))
            continue
        if task.name in tasks:
            tasks.problems.append(f"{f}: task name {task.name!r} is taken by another file of {root}")
            continue
        tasks[task.name] = task
    if not tasks:
        why = "; ".join(tasks.problems[:3]) or "no *.py task files"
        raise SuiteError(f"{root}: no task could be loaded ({why})")
    return tasks


def _start_files(f: Path) -> list[Path]:
    """The START_FILE a task file names (read from its syntax, without running it)."""
    try:
        tree = parse(f.read_text(), str(f))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    return [(f.parent / node.value.value).resolve() for node in tree.body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "START_FILE" for t in node.targets)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)]


def load_file(path: Path, suite: str | None = None) -> Task:
    """The task a file defines, in `suite` (default: the file's own path); a SuiteError naming
    the file and the bad piece otherwise."""
    module = _run_module(path)
    ns = vars(module)
    entry = _need(ns, "ENTRY", str, path)
    if not entry.isidentifier():
        raise SuiteError(f"{path}: ENTRY must be a Python identifier, not {entry!r}")
    for fn in ("reference", "make_inputs"):
        if not callable(ns.get(fn)):
            raise SuiteError(f"{path}: no `{fn}` function (see `{_program()} new-task` for a template)")
    dtypes = _dtypes(ns, path)
    name = ns.get("NAME", path.stem)
    if not isinstance(name, str) or not name.isidentifier():
        raise SuiteError(f"{path}: NAME must be a Python identifier, not {name!r}")
    cost = ns.get("cost", _no_cost)
    if not callable(cost):
        raise SuiteError(f"{path}: cost must be a function cost(shape, dtype) -> (bytes, flops)")
    if not isinstance(ns.get("DIFFICULTY", 0), int):
        raise SuiteError(f"{path}: DIFFICULTY must be an integer (what --difficulty selects on)")
    inplace, plain = _inplace(ns, path), _non_sizes(ns, path)
    reference = functools.partial(_updated_inputs, ns["reference"], inplace) if inplace else ns["reference"]
    task = Task(
        name=name, suite=suite or str(path.resolve()), category=str(ns.get("CATEGORY", "user")), entry=entry,
        reference=reference, make_inputs=ns["make_inputs"],
        shapes=_shape_set(ns.get("SHAPES"), "SHAPES", path, plain),
        interpreter_shapes=_shape_set(ns["CPU_SHAPES"], "CPU_SHAPES", path, plain) if "CPU_SHAPES" in ns else None,
        dtypes=dtypes, tolerance=_tolerance(ns, path), cost=cost, start_source=_start(ns, entry, path),
        instruction=str(ns.get("INSTRUCTION") or _instruction(entry, ns["reference"], inplace, _torch_ops(ns, path))),
        difficulty=ns.get("DIFFICULTY"), tags=("user",), inplace=inplace, torch_ops=_torch_ops(ns, path),
        variants=_variants(ns, path))
    if _needs_check(path):
        check_runs(task, path)
        _CHECKED.add(_stamp(path))
    return task


# task files whose code ran cleanly in this process, by (path, mtime, size): a command loads its
# suite more than once (search, LLM corpus, export), and each load would run every reference again
_CHECKED: set[tuple] = set()


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size


def _needs_check(path: Path) -> bool:
    """The evaluator's workers (TE_DEVICE set) load the files the command already checked: a
    worker loads a folder once per task, and a reference on GPU-sized shapes is not cheap."""
    return "TE_DEVICE" not in os.environ and _stamp(path) not in _CHECKED


def _run_module(path: Path) -> ModuleType:
    try:
        source = path.read_text()
        code = compile(source, str(path), "exec")
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: cannot read the task file ({e})") from None
    except SyntaxError as e:
        raise SuiteError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    name = "te_task_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module = ModuleType(name)
    module.__file__ = str(path.resolve())
    sys.modules[name] = module  # what dataclasses and pickling look a function's module up in
    try:
        exec(code, vars(module))
    except Exception as e:  # noqa: BLE001 - any failure of the user's module is their file's to fix
        del sys.modules[name]
        raise SuiteError(f"{path}: running the task file failed: {type(e).__name__}: {e}") from None
    return module


def _need(ns: dict, key: str, kind: type, path: Path) -> Any:
    if key not in ns:
        raise SuiteError(f"{path}: no {key} (see `{_program()} new-task` for a template)")
    if not isinstance(ns[key], kind):
        raise SuiteError(f"{path}: {key} must be a {kind.__name__}, not {type(ns[key]).__name__}")
    return ns[key]


def _dtypes(ns: dict, path: Path) -> tuple[str, ...]:
    given = ns.get("DTYPES")
    if isinstance(given, str) or not isinstance(given, (list, tuple)) or not given:
        raise SuiteError(f"{path}: DTYPES must be a non-empty list of torch dtype names, e.g. [\"float32\"]")
    for d in given:
        if not isinstance(d, str) or not isinstance(getattr(torch, d, None), torch.dtype):
            raise SuiteError(f"{path}: DTYPES: {d!r} is not a torch dtype name (float32, float16, bfloat16, ...)")
    return tuple(given)


def _inplace(ns: dict, path: Path) -> tuple[int, ...]:
    given = ns.get("INPLACE", ())
    ok = isinstance(given, (tuple, list)) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                   for i in given)
    if not ok or len(set(given)) != len(given):
        raise SuiteError(f"{path}: INPLACE must be a tuple of the positions of the inputs updated in place, "
                         f"e.g. (0,), not {given!r}")
    return tuple(given)


def _non_sizes(ns: dict, path: Path) -> frozenset[str]:
    given = ns.get("NON_SIZE_KEYS", ())
    if isinstance(given, str) or not isinstance(given, (tuple, list, set, frozenset)) \
            or not all(isinstance(k, str) for k in given):
        raise SuiteError(f"{path}: NON_SIZE_KEYS must be a tuple of shape keys, e.g. (\"stride\",)")
    return frozenset(given)


def _variants(ns: dict, path: Path) -> tuple[str, ...]:
    given = ns.get("VARIANTS", Task.variants)
    if not isinstance(given, tuple) or any(v not in VARIANTS for v in given):
        raise SuiteError(f"{path}: VARIANTS must be a tuple of input variants among {', '.join(sorted(VARIANTS))} "
                         f"(or () for none), not {given!r}")
    return given


def _torch_ops(ns: dict, path: Path) -> bool:
    given = ns.get("TORCH_OPS", "counted")
    if given not in ("allowed", "counted"):
        raise SuiteError(f"{path}: TORCH_OPS must be \"allowed\" (torch work around the kernels counts in the "
                         f"time) or \"counted\" (the default: kernels must do the work), not {given!r}")
    return given == "allowed"


def _updated_inputs(reference: Any, positions: tuple[int, ...], *args: Any) -> tuple:
    """An INPLACE task's reference: it updates its inputs; those, after the call, are its outputs."""
    reference(*args)
    return tuple(args[i] for i in positions)


def _shape_set(given: Any, key: str, path: Path, plain: frozenset[str] = frozenset()) -> ShapeSet:
    if not isinstance(given, dict) or set(given) != {"tuning", "heldout"}:
        raise SuiteError(f"{path}: {key} must be a dict with a \"tuning\" and a \"heldout\" list of shapes")
    lists = []
    for part in ("tuning", "heldout"):
        shapes = given[part]
        if not isinstance(shapes, (list, tuple)) or not shapes:
            raise SuiteError(f"{path}: {key}[{part!r}] is empty: give at least one shape")
        for s in shapes:
            if not isinstance(s, dict) or not s or not all(isinstance(k, str) for k in s):
                raise SuiteError(f"{path}: {key}[{part!r}]: {s!r} is not a shape (a dict like {{\"N\": 4096}})")
            for k, v in s.items():
                if k[:1].isupper() and not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                    raise SuiteError(f"{path}: {key}[{part!r}]: size {k!r} is {v!r}: sizes (upper-case keys) "
                                     "must be positive integers")
                if not k[:1].isupper() and isinstance(v, int) and not isinstance(v, bool) and k not in plain:
                    raise SuiteError(f"{path}: {key}[{part!r}]: key {k!r} holds an integer but is not upper-case, "
                                     f"so held-out shapes would never vary it: name it {k.upper()!r} if it is a "
                                     f"size, or declare NON_SIZE_KEYS = ({k!r},) if it is not")
        lists.append(tuple(dict(s) for s in shapes))
    return ShapeSet(tuning=lists[0], heldout=lists[1])


def _tolerance(ns: dict, path: Path) -> dict[str, Any]:
    """{dtype: (atol, rtol) or {metric: bound}}: metrics named at the top level ({"cosine": 0.999})
    judge every output as a whole tensor (fitness.common.metric_tolerance); a dtype's entry wins."""
    given = ns.get("TOLERANCE", {})
    if not isinstance(given, dict):
        raise SuiteError(f"{path}: TOLERANCE must be a dict {{output dtype: (atol, rtol)}} or {{metric: bound}}")
    out: dict[str, Any] = dict(DEFAULT_TOLERANCE)
    top = {k: v for k, v in given.items() if k in METRICS}
    try:
        if top:
            metrics = parse_metrics(top, f"{path}: TOLERANCE")
            out = {dtype: dict(metrics) for dtype in out}
        for dtype, bound in given.items():
            if dtype in METRICS:
                continue
            if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
                raise ValueError(f"{path}: TOLERANCE: {dtype!r} is neither a torch dtype name nor a metric "
                                 f"({', '.join(METRICS)})")
            out[dtype] = parse_metrics(bound, f"{path}: TOLERANCE[{dtype!r}]") if isinstance(bound, dict) \
                else _pair(bound, dtype, path)
    except ValueError as e:
        raise SuiteError(str(e)) from None
    return out


def _pair(pair: Any, dtype: str, path: Path) -> tuple[float, float]:
    ok = isinstance(pair, (tuple, list)) and len(pair) == 2 and \
        all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in pair)
    if not ok:
        raise ValueError(f"{path}: TOLERANCE[{dtype!r}] must be (atol, rtol), two numbers >= 0, or {{metric: bound}}")
    return float(pair[0]), float(pair[1])


def _start(ns: dict, entry: str, path: Path) -> str:
    """The starting kernel's source, checked to parse and to define ENTRY at top level."""
    if "START" in ns:
        source, where = _need(ns, "START", str, path), "START"
    elif "START_FILE" in ns:
        kernel = path.parent / _need(ns, "START_FILE", str, path)
        try:
            source, where = kernel.read_text(), f"START_FILE {kernel}"
        except (OSError, UnicodeDecodeError) as e:
            raise SuiteError(f"{path}: cannot read START_FILE {kernel} ({e})") from None
    else:
        raise SuiteError(f"{path}: no START (the starting kernel's source) or START_FILE (its path)")
    try:
        tree = parse(source, where)
    except SyntaxError as e:
        raise SuiteError(f"{path}: {where} has a syntax error at line {e.lineno}: {e.msg}") from None
    if entry not in _top_level_names(tree):
        raise SuiteError(f"{path}: {where} does not define the entry function {entry!r} (ENTRY) at top level")
    return source


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _instruction(entry: str, reference: Any, inplace: tuple[int, ...] = (), torch_ops: bool = False) -> str:
    """What the LLM operators are told when the file says nothing: the reference's own code,
    and what the task's INPLACE and TORCH_OPS change."""
    notes = ""
    if inplace:
        notes += (f"\n\n{entry} updates its input(s) {', '.join(map(str, inplace))} in place, as the reference "
                  "does; those inputs after the call are what is compared, not what it returns.")
    if torch_ops:
        notes += "\n\ntorch operations around the Triton kernels are allowed; their time counts in the total."
    try:
        code = inspect.getsource(reference)
    except (OSError, TypeError):
        return f"{entry}: compute what the task's PyTorch reference computes.{notes}"
    verb = ("must do", "does") if inplace else ("must return", "returns")
    return f"{entry}(...) {verb[0]} what this PyTorch reference {verb[1]} for the same inputs:\n\n{code}{notes}"


def write_template(name: str, folder: str) -> Path:
    """`run.py new-task NAME`: the commented template as FOLDER/NAME.py, task and entry named NAME."""
    if not name.isidentifier():
        raise SuiteError(f"new-task: NAME must be a Python identifier (letters, digits, _), not {name!r}")
    out = Path(folder) / f"{name}.py"
    if out.exists():
        raise SuiteError(f"new-task: {out} exists already; give another NAME or --out DIR")
    if not Path(folder).is_dir():
        raise SuiteError(f"new-task: {folder} is not a folder")
    # the template's docstring names its commands as the user runs them (`triton-evolve` once installed)
    out.write_text(TEMPLATE.read_text().replace(TEMPLATE_NAME, name).replace("python run.py", _program()))
    return out


def _program() -> str:
    from evolve.cli_options import program

    return program()


def _no_cost(shape: dict, dtype: str) -> tuple[float, float]:
    return 0.0, 0.0
