"""The first gate: read the candidate's source without running any of it.

Kernels need torch, triton and a little arithmetic; anything that reaches the process, the
filesystem, other threads, the interpreter's internals or the timing machinery is a way to game
the evaluator, so imports are allow-listed and the known escape hatches are refused by name.
The worker repeats the important checks at run time; this gate gives the fast, clear reason.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from suites.ast_lock import parse

MAX_SOURCE_BYTES = 1 << 20

ALLOWED_IMPORTS = {
    "torch", "torch.nn", "torch.nn.functional", "triton", "triton.language", "triton.language.math",
    "triton.language.extra", "triton.language.extra.cuda", "triton.language.extra.libdevice",
    "triton.language.extra.cuda.libdevice", "math", "typing", "functools", "itertools",
    "dataclasses", "enum", "collections", "operator", "__future__",
}
# names that are refused wherever they appear as a call, attribute or bare name
BANNED_CALLS = {
    "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "open", "input", "breakpoint", "memoryview",
}
BANNED_ATTRS = {
    # side streams and events: work hidden from the timed stream
    "Stream", "ExternalStream", "stream", "set_stream", "Event", "current_stream", "default_stream",
    # timers and benchmarking machinery
    "perf_counter", "perf_counter_ns", "monotonic", "elapsed_time", "do_bench", "do_bench_cudagraph",
    "synchronize", "CUDAGraph", "graph",
    # memory limits the harness sets
    "set_per_process_memory_fraction", "set_allocator_settings",
    # frames, code objects and the interpreter's guts
    "f_back", "f_globals", "f_locals", "gi_frame", "tb_frame", "_getframe", "gi_code", "cr_frame",
    # modules that libraries re-export as public attributes (torch.sys, torch.os): through them a
    # candidate reaches the worker's own objects and its reply channel
    "sys", "os", "subprocess", "builtins", "modules", "importlib", "ctypes", "gc", "multiprocessing",
    "cpp_extension", "load_inline", "hub", "environ",
}
ALLOWED_DUNDERS = {"__init__", "__name__", "__call__", "__repr__", "__len__", "__future__"}
IMPORT_ROOTS = {"torch", "triton", "tl", "math", "functools", "itertools", "collections", "operator"}


@dataclass(frozen=True)
class GateResult:
    ok: bool
    reason: str = ""


def check_source(source: str | bytes, entry: str, tolerated: frozenset = frozenset()) -> GateResult:
    """`tolerated`: problems (as `allowance` gives them) that the suite's own reference has; a
    candidate may use what the reference it descends from uses."""
    if isinstance(source, bytes):
        if len(source) > MAX_SOURCE_BYTES:
            return GateResult(False, f"source is {len(source)} bytes, over the {MAX_SOURCE_BYTES} limit")
        if b"\x00" in source:
            return GateResult(False, "source is binary (contains NUL bytes)")
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as e:
            return GateResult(False, f"source is not UTF-8 text: {e}")
    if len(source.encode()) > MAX_SOURCE_BYTES:
        return GateResult(False, f"source is over the {MAX_SOURCE_BYTES}-byte limit")
    if not source.strip():
        return GateResult(False, "source is empty")
    try:
        tree = parse(source)
    except SyntaxError as e:
        return GateResult(False, f"not valid Python: {e.msg} (line {e.lineno})")
    except (ValueError, RecursionError, MemoryError) as e:
        return GateResult(False, f"cannot parse: {e}")
    problem = next((p for p in _banned(tree) if _key(p) not in tolerated), "")
    if problem:
        return GateResult(False, problem)
    # a task may name several entry points (some ROCm tests call two functions): each must exist
    missing = [e for e in (x.strip() for x in entry.split(",")) if e and not defines(tree, e)]
    if missing:
        return GateResult(False, f"no top-level function named {missing[0]!r} (an entry point)")
    if not _has_triton_jit(tree):
        return GateResult(False, "no @triton.jit kernel defined")
    return GateResult(True)


def allowance(reference_source: str) -> frozenset:
    """The gate's problems with a suite's reference, without line numbers."""
    try:
        return frozenset(_key(p) for p in _banned(parse(reference_source)))
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()


def _key(problem: str) -> str:
    return re.sub(r" \(line \d+\)$", "", problem)


def _banned(tree: ast.AST):
    """Every problem, in source-walk order."""
    aliases = set(IMPORT_ROOTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in ALLOWED_IMPORTS:
                    yield f"import of {a.name!r} is not allowed in a kernel (line {node.lineno})"
                aliases.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level or mod not in ALLOWED_IMPORTS:
                yield f"import from {mod or '.'!r} is not allowed in a kernel (line {node.lineno})"
            for a in node.names:
                full = f"{mod}.{a.name}"
                if a.name == "*" or (full not in ALLOWED_IMPORTS and a.name in BANNED_ATTRS | BANNED_CALLS):
                    yield f"import of {full!r} is not allowed in a kernel (line {node.lineno})"
                aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Name) and node.id in BANNED_CALLS:
            yield f"use of {node.id}() is not allowed in a kernel (line {node.lineno})"
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            yield f"use of __builtins__ is not allowed in a kernel (line {node.lineno})"
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            if attr in BANNED_ATTRS:
                yield f"use of .{attr} is not allowed in a kernel (line {node.lineno})"
            elif attr.startswith("__") and attr not in ALLOWED_DUNDERS:
                yield f"use of .{attr} is not allowed in a kernel (line {node.lineno})"
            elif attr.startswith("_") and _root_name(node) in aliases:
                yield f"private attribute .{attr} of a library is not allowed (line {node.lineno})"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and _root_name(sub) in aliases:
                        yield (f"assigning to a library attribute ({ast.unparse(sub)}) is not allowed "
                                f"(line {node.lineno})")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            # module-level mutable state across calls is how result caches are kept
            yield f"'{type(node).__name__.lower()}' statements are not allowed in a kernel (line {node.lineno})"


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def defines(tree: ast.Module, name: str) -> bool:
    """Whether the module defines `name` at top level: a function, a class (an autograd.Function
    or nn.Module entry point) or an assignment."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _has_triton_jit(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                text = ast.unparse(target)
                if text.endswith("jit") and ("triton" in text or text == "jit"):
                    return True
    return False
