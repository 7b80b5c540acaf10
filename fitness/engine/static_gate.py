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
# builtins refused wherever they appear as a bare name, unless a function's own local (a
# parameter or variable named `input`, as 116 of 184 TritonBench references take, never reaches
# the builtin: a function's locals are fixed when it is compiled)
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
# strings LLMs read (`kernel.__doc__`, `triton.__version__`), of a library's objects too
STRING_DUNDERS = {"__name__", "__doc__", "__version__", "__qualname__"}
ALLOWED_DUNDERS = {"__init__", "__call__", "__repr__", "__len__", "__future__"} | STRING_DUNDERS
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
    local = _function_locals(tree)
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
        elif isinstance(node, ast.Name) and node.id in BANNED_CALLS and id(node) not in local \
                and isinstance(node.ctx, ast.Load):
            yield (f"use of the builtin {node.id}() is not allowed in a kernel (a parameter or local "
                   f"variable named {node.id} is fine) (line {node.lineno})")
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            yield f"use of __builtins__ is not allowed in a kernel (line {node.lineno})"
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            if attr in BANNED_ATTRS:
                yield f"use of .{attr} is not allowed in a kernel (line {node.lineno})"
            elif attr.startswith("__") and attr not in ALLOWED_DUNDERS:
                yield f"use of .{attr} is not allowed in a kernel (line {node.lineno})"
            elif attr.startswith("_") and attr not in STRING_DUNDERS and _root_name(node) in aliases:
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


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)


def _function_locals(tree: ast.AST) -> set[int]:
    """ids of the Name nodes that resolve, by Python's static scoping, to a local of an
    enclosing function, lambda or comprehension: those never reach a builtin. Module and class
    scopes are dynamic (a `del` there uncovers the builtin), so their names do not count."""
    found: set[int] = set()
    _visit_scope(tree, [], found)
    return found


def _visit_scope(scope: ast.AST, outer: list[set[str]], found: set[int]) -> None:
    static = isinstance(scope, _SCOPES)
    chain = outer + [_bound_in(scope)] if static else outer
    for node in _own_nodes(scope):
        if isinstance(node, ast.Name) and any(node.id in names for names in chain):
            found.add(id(node))
        elif isinstance(node, (*_SCOPES, ast.ClassDef)) and node is not scope:
            _visit_scope(node, chain, found)


def _own_nodes(scope: ast.AST):
    """Nodes evaluated in `scope` itself, stopping at nested scopes (yielded, not entered); a
    nested def's decorators, defaults and annotations belong to this scope and are walked here."""
    todo = _inner_parts(scope)
    while todo:
        node = todo.pop()
        yield node
        todo.extend(_outer_parts(node) if isinstance(node, (*_SCOPES, ast.ClassDef)) else ast.iter_child_nodes(node))


def _inner_parts(scope: ast.AST) -> list[ast.AST]:
    """What a scope evaluates inside itself (a function's parameters' defaults are not)."""
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
        return list(scope.body)
    if isinstance(scope, ast.Lambda):
        return [scope.body]
    if isinstance(scope, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        heads: list[ast.AST] = [scope.key, scope.value] if isinstance(scope, ast.DictComp) else [scope.elt]
        gens = [p for i, g in enumerate(scope.generators) for p in ([g.target, *g.ifs] + ([g.iter] if i else []))]
        return heads + gens
    return list(ast.iter_child_nodes(scope))


def _outer_parts(node: ast.AST) -> list[ast.AST]:
    """What a nested scope's definition evaluates in the enclosing scope."""
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        return [node.generators[0].iter]
    parts = [*getattr(node, "decorator_list", []), *getattr(node, "bases", []), *getattr(node, "keywords", [])]
    args = getattr(node, "args", None)
    if isinstance(args, ast.arguments):
        every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
        parts += args.defaults + [d for d in args.kw_defaults if d] + [a.annotation for a in every if a.annotation]
    returns = getattr(node, "returns", None)
    return parts + ([returns] if returns else [])


def _bound_in(scope: ast.AST) -> set[str]:
    """The names a function-like scope binds: its parameters and whatever it stores."""
    names: set[str] = set()
    args = getattr(scope, "args", None)
    if isinstance(args, ast.arguments):
        every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
        names.update(a.arg for a in every)
    for node in _own_nodes(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not scope:
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


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
