"""The candidate's @triton.jit kernels built from their own source alone, for the replay under the
Triton interpreter (CPU), where a kernel is Python and no binary exists to load.

Importing the candidate's module would let its own code decide what the replay runs (patch the
replayer, swap a kernel, compute the answer at import). So the replay never imports it: the engine
parses the source, keeps only the @triton.jit function definitions (their other decorators, such
as autotune and heuristics, dropped: a trace records the final arguments of each launch), the
imports of Triton's language and `math`, and module constants written as literals, checks each
kernel body names nothing else (no imports, no private attributes, no global the engine did not
provide), and executes that in a namespace it built. Whatever else the module does never runs.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import math
import os
import tempfile
from typing import Any

from fitness.clean.compiled import NotReplayable, ReplayError
from suites import ast_lock


def _triton_jit() -> ast.expr:
    """The expression `triton.jit`, built rather than parsed."""
    return ast.Attribute(value=ast.Name(id="triton", ctx=ast.Load()), attr="jit", ctx=ast.Load())

# what kernel bodies may call besides Triton's language (the interpreter runs them as Python)
SAFE_BUILTINS = {name: getattr(builtins, name) for name in (
    "range", "min", "max", "len", "int", "float", "bool", "abs", "tuple", "list", "enumerate", "zip",
    "isinstance", "round", "pow", "divmod", "slice", "AssertionError", "ValueError", "print")}
# modules a kernel may name, and what of `triton` itself
_MODULES = ("triton.language", "math")
_TRITON_NAMES = {"language", "jit", "cdiv", "next_power_of_2"}
_DENIED_ATTRS = {"handle", "fn"}  # interpreter internals: the bridge from a kernel's values to host objects


def kernels_from_source(source: str, module_name: str) -> dict[str, Any]:
    """{'module:qualname': the interpreted kernel} for each top-level @triton.jit function of
    `source`, built without running any other code of it; a ReplayError says what was refused."""
    import triton

    try:
        tree = ast_lock.parse(source)
    except SyntaxError as e:
        raise ReplayError(f"the candidate's source does not parse: {e}") from None
    ns: dict[str, Any] = {"__name__": module_name, "__builtins__": dict(SAFE_BUILTINS),
                          "triton": triton, "tl": importlib.import_module("triton.language"), "math": math}
    kept: list[ast.stmt] = []
    for node in _top_level(tree.body, ns):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _bind_imports(node, ns)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            _bind_constant(node, ns)
        elif isinstance(node, ast.FunctionDef):
            jit = _jit_decorator(node)
            if jit is not None:
                node.decorator_list = [jit]
                kept.append(node)
    names = set(ns) | {f.name for f in kept if isinstance(f, ast.FunctionDef)} | set(SAFE_BUILTINS)
    for fn in kept:
        assert isinstance(fn, ast.FunctionDef)
        _check_body(fn, names, ns)
    return _exec(kept, ns, module_name)


def _top_level(body: list[ast.stmt], ns: dict) -> list[ast.stmt]:
    """The module's statements, with a top-level `try:` read as TritonBench writes it for a helper
    that moved between Triton versions (`try: f = tl.f` / `except AttributeError: @triton.jit def
    f`): the `try` body's aliases of Triton's language where they resolve here, else the handlers'
    definitions; no other code of it runs."""
    out: list[ast.stmt] = []
    for node in body:
        if not isinstance(node, ast.Try):
            out.append(node)
            continue
        aliased = [a for a in node.body if isinstance(a, ast.Assign) and _bind_alias(a, ns)]
        if len(aliased) != len(node.body):
            out += [s for h in node.handlers for s in h.body]
    return out


def _bind_alias(node: ast.Assign, ns: dict) -> bool:
    """`NAME = tl.attr` (an attribute of Triton's language, or of math, that exists here): bound."""
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name) or not isinstance(node.value, ast.Attribute):
        return False
    chain: list[str] = []
    value: ast.expr = node.value
    while isinstance(value, ast.Attribute):
        chain.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name) or not isinstance(ns.get(value.id), type(math)) \
            or any(a.startswith("_") for a in chain):
        return False
    obj = ns[value.id]
    for attr in reversed(chain):
        obj = getattr(obj, attr, None)
    if obj is None or isinstance(obj, type(math)) or _module(getattr(obj, "__module__", "") or "") is None:
        return False
    ns[node.targets[0].id] = obj
    return True


def _module(name: str) -> Any:
    if name == "triton" or any(name == m or name.startswith(m + ".") for m in _MODULES):
        try:
            return importlib.import_module(name)
        except ImportError:
            return None
    return None


def _bind_imports(node: ast.Import | ast.ImportFrom, ns: dict) -> None:
    """Imports of Triton's language and math, bound as the source names them; others skipped
    (a kernel that reads such a name is refused by _check_body)."""
    if isinstance(node, ast.Import):
        for a in node.names:
            mod = _module(a.name)
            if mod is not None:
                ns[a.asname or a.name.partition(".")[0]] = mod if a.asname else _module(a.name.partition(".")[0])
        return
    base = _module(node.module or "") if node.level == 0 else None
    for a in node.names:
        if base is None or a.name == "*":
            continue
        sub = _module(f"{node.module}.{a.name}")
        if sub is not None:
            ns[a.asname or a.name] = sub
        elif node.module != "triton" or a.name in _TRITON_NAMES:
            value = getattr(base, a.name, None) if not a.name.startswith("_") else None
            if value is not None and not isinstance(value, type(math)):
                ns[a.asname or a.name] = value


def _bind_constant(node: ast.Assign | ast.AnnAssign, ns: dict) -> None:
    """`NAME = literal` or `NAME = tl.constexpr(literal)` at module level (kernels read such
    constants as globals); anything else is not run."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if node.value is None or not all(isinstance(t, ast.Name) for t in targets):
        return
    value = node.value
    wrap = False
    if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords \
            and ast.unparse(value.func) in ("tl.constexpr", "triton.language.constexpr", "constexpr"):
        value, wrap = value.args[0], True
    try:
        plain = ast_lock.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return
    if not isinstance(plain, (bool, int, float, str, type(None))):
        return
    import triton.language as tl

    for t in targets:
        assert isinstance(t, ast.Name)
        ns[t.id] = tl.constexpr(plain) if wrap else plain


def _jit_decorator(fn: ast.FunctionDef) -> ast.expr | None:
    """The function's @triton.jit (bare or called with literal options), or None."""
    for d in fn.decorator_list:
        call = d if isinstance(d, ast.Call) else None
        target = call.func if call is not None else d
        if ast.unparse(target) not in ("triton.jit", "jit"):
            continue
        if call is None:
            return _triton_jit()
        options = [k for k in call.keywords if k.arg in ("do_not_specialize", "debug", "noinline")]
        if call.args or any(not _literal(k.value) for k in options):
            return None
        return ast.Call(func=_triton_jit(), args=[], keywords=options)
    return None


def _literal(node: ast.expr) -> bool:
    try:
        ast_lock.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _check_body(fn: ast.FunctionDef, globals_: set[str], ns: dict) -> None:
    """What a kernel body may name: its arguments and locals, the globals the engine provided,
    attributes of Triton's language and math (no private ones, no module outside them)."""
    local = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    where = f"kernel {fn.name}"
    for node in ast.walk(fn):
        if node is not fn and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            raise NotReplayable(f"{where} defines a function or class inside it")
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Await, ast.Yield,
                             ast.YieldFrom)):
            raise NotReplayable(f"{where} holds a {type(node).__name__.lower()} statement")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local | globals_:
            raise NotReplayable(f"{where} reads {node.id!r}, which the replay does not build from the source alone")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_") or node.attr in _DENIED_ATTRS:
                raise ReplayError(f"{where} reads the attribute {node.attr!r}")
            _check_chain(node, ns, where, local)
    for d in fn.args.defaults + fn.args.kw_defaults:
        if d is not None and not _plain_default(d, ns):
            raise NotReplayable(f"{where} has a default argument that is neither a literal nor a module constant")


def _plain_default(node: ast.expr, ns: dict) -> bool:
    """A parameter's default the engine can give: a literal, a module constant it bound from a
    literal (`MODE = tl.constexpr(3)`: TritonBench kldiv), or an attribute of Triton's language
    (`tl.float32`)."""
    if _literal(node):
        return True
    if isinstance(node, ast.Name):
        value = ns.get(node.id)
        return isinstance(value, (bool, int, float, str)) or type(value).__name__ == "constexpr"
    chain: list[str] = []
    cur: ast.expr = node
    while isinstance(cur, ast.Attribute):
        chain.append(cur.attr)
        cur = cur.value
    return isinstance(cur, ast.Name) and isinstance(ns.get(cur.id), type(math)) and bool(chain) \
        and not any(a.startswith("_") for a in chain)


def _check_chain(node: ast.Attribute, ns: dict, where: str, local: set[str]) -> None:
    """An attribute chain from a module the engine provided stays within Triton's language or math."""
    chain: list[str] = []
    cur: ast.expr = node
    while isinstance(cur, ast.Attribute):
        chain.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name) or cur.id in local or not isinstance(ns.get(cur.id), type(math)):
        return
    obj = ns[cur.id]
    for attr in reversed(chain):
        if not isinstance(obj, type(math)):
            return
        if obj.__name__ == "triton" and attr not in _TRITON_NAMES:
            raise NotReplayable(f"{where} reads triton.{attr}")
        obj = getattr(obj, attr, None)
        if isinstance(obj, type(math)) and _module(obj.__name__) is None:
            raise NotReplayable(f"{where} reaches the module {obj.__name__}")


def _exec(kept: list[ast.stmt], ns: dict, module_name: str) -> dict[str, Any]:
    """The kept definitions executed in `ns`, from a file of their own (the interpreter reads a
    kernel's source back through inspect)."""
    module = ast.Module(body=kept, type_ignores=[])
    ast.fix_missing_locations(module)
    text = ast.unparse(module) + "\n"
    folder = tempfile.mkdtemp(prefix="te-kernels-")
    path = os.path.join(folder, f"{module_name}_kernels.py")
    with open(path, "w") as f:
        f.write(text)
    try:
        exec(compile(text, path, "exec"), ns)  # noqa: S102 - definitions only, checked above
    except Exception as e:  # noqa: BLE001 - a definition the interpreter refuses
        raise NotReplayable(f"the candidate's kernels do not build from their source: {e}") from None
    kernels = {}
    for node in kept:
        assert isinstance(node, ast.FunctionDef)
        fn = ns.get(node.name)
        if type(fn).__name__ in ("InterpretedFunction", "JITFunction"):
            kernels[f"{module_name}:{node.name}"] = fn
    return kernels


def constexpr_params(source: str) -> dict[str, tuple[tuple[int, ...], frozenset[str]]]:
    """{qualname: (positions, names)} of each top-level @triton.jit kernel's `tl.constexpr`
    parameters, read from the source's syntax alone (nothing of it runs): under the interpreter,
    a launch's constexprs are plain arguments, and they are what makes two launches of one kernel
    different programs (fitness.clean.trace_check.program_of)."""
    try:
        tree = ast_lock.parse(source)
    except SyntaxError:
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and _jit_decorator(node) is not None:
            params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            marked = [(i, p.arg) for i, p in enumerate(params)
                      if p.annotation is not None and "constexpr" in ast.unparse(p.annotation)]
            found[node.name] = (tuple(i for i, _ in marked), frozenset(n for _, n in marked))
    return found
