"""What in a baseline's code makes its call time unlike the replay of its own kernels, read from
the source and never run: named when an A/A timing is far from parity (fitness.engine.verdict), so a
task's record says which defect of the suite's code stops it being timed. H100 TritonBench:
cross_entropy2 and nested_loops_processing print their tensors inside the call (23.0x and 4.6x
"faster" than themselves, eager); reversed_cumsum_scalar autotunes with `key=[]` (0.66x: each
process keeps the config its first input picked). An autotuner keyed on the shape is named too,
below those: fused_layernorm_triton (0.56x) and matmul_dequantize_int4 (0.79x) autotune, and four
fresh processes of fused_layernorm_triton's code picked 3 different sets of configs for the same
inputs, alone or at once (bench/autotune_picks.py, H100): the replay runs the config the
candidate's process picked, the baseline its own.
"""
from __future__ import annotations

import ast

from suites.ast_lock import parse

HOST_WAITS = {"item", "tolist", "cpu", "numpy", "synchronize"}  # calls that wait for the device


def timing_hazards(source: str) -> list[str]:
    """Short phrases, one per kind of hazard (the first place each is seen)."""
    try:
        tree = parse(source)
    except SyntaxError:
        return []
    found: dict[str, str] = {}
    keyed = ""  # an autotuner keyed on the shape: named only when nothing more specific is found
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        tuned = _autotuned(fn)
        if tuned == "on nothing":
            found.setdefault("autotune", f"it autotunes {fn.name} with key=[] (line {fn.lineno}): each process keeps "
                                         "the config its first input picked, whatever the shape")
        elif tuned and not keyed:
            keyed = (f"it autotunes {fn.name} over {tuned} (line {fn.lineno}): each process picks the config its own "
                     "benchmarks favour, and two processes of the same code can pick differently: the replay then "
                     "runs another config than the baseline")
        if _is_jit(fn):
            continue
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            name = _called(call)
            if name == "print":
                found.setdefault("print", f"it prints inside {fn.name} (line {call.lineno})")
            elif name in HOST_WAITS and isinstance(call.func, ast.Attribute):
                found.setdefault("wait", f"it waits for the GPU inside {fn.name} (line {call.lineno}: .{name}())")
    return list(found.values()) or ([keyed] if keyed else [])


def _called(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _decorators(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    out = []
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        out.append((name, d))
    return out


def _is_jit(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(name in ("jit", "autotune", "heuristics") for name, _ in _decorators(fn))


def _autotuned(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """'on nothing' for @triton.autotune over several configs with an empty key (tuned once per
    process); 'N configs' (or 'several configs') for one over several with a key; '' otherwise."""
    for name, d in _decorators(fn):
        if name != "autotune" or not isinstance(d, ast.Call):
            continue
        kw = {k.arg: k.value for k in d.keywords}
        configs = kw.get("configs", d.args[0] if d.args else None)
        key = kw.get("key", d.args[1] if len(d.args) > 1 else None)
        n = len(configs.elts) if isinstance(configs, (ast.List, ast.Tuple)) else None
        if n is not None and n < 2:
            continue
        if isinstance(key, (ast.List, ast.Tuple)) and not key.elts:
            return "on nothing"
        return f"{n} configs" if n else "several configs"
    return ""
