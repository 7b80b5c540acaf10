"""LLM-free operators over a kernel's launch and compile parameters ("knobs").

Knobs are found through `ast` and rewritten as text spans, so comments and layout survive and
the child differs from its parent only where a knob changed:
- power-of-two integer keywords at a launch site (`kernel[grid](..., BLOCK=128)`), and integer
  names assigned in the wrapper and passed to a launch (`BLOCK = 256; kernel[grid](..., BLOCK)`);
- `num_warps` and `num_stages` at a launch site, inserted when absent;
- the values inside `triton.Config({...}, num_warps=..., num_stages=...)` autotune lists.
A knob's key names where it sits (function, kernel, launch ordinal, parameter), so two variants
of one kernel have the same keys: that is what crossover mixes. Changing a block size may break
a kernel whose grid assumes it; the evaluator says so and selection drops the child.
"""
from __future__ import annotations

import ast
import functools
import random
from dataclasses import dataclass

from operators.base import Child, Context, Operator, Parent
from suites.ast_lock import parse

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
BLOCK_MIN, BLOCK_MAX = 8, 8192


@dataclass(frozen=True)
class Knob:
    key: tuple
    kind: str  # "block", "num_warps" or "num_stages"
    value: int | None  # None: not given at the site (Triton's default applies); can be inserted
    span: tuple[int, int] | None  # byte offsets of the value's text
    insert_at: int | None = None  # byte offset after a launch's last argument

    def choices(self) -> list[int]:
        if self.kind == "num_warps":
            return [w for w in WARPS if w != self.value]
        if self.kind == "num_stages":
            return [s for s in STAGES if s != self.value]
        v = self.value
        return [x for x in (v // 2, v * 2) if BLOCK_MIN <= x <= BLOCK_MAX]


def _is_pow2(v) -> bool:
    return type(v) is int and v >= 2 and v & (v - 1) == 0


def _int_const(node) -> int | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _decorated(tree: ast.Module, words: tuple[str, ...]) -> set[str]:
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and any(w in ast.unparse(d) for d in node.decorator_list for w in words)}


def _jit_names(tree: ast.Module) -> set[str]:
    return _decorated(tree, ("jit", "autotune", "heuristics"))


class _Offsets:
    def __init__(self, data: bytes):
        self.starts = [0]
        for i, b in enumerate(data):
            if b == 10:
                self.starts.append(i + 1)

    def at(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node) -> tuple[int, int]:
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)


def find_knobs(source: str) -> list[Knob]:
    """Every knob of the source, in source order; [] when it does not parse."""
    return list(_knobs_of(source))


@functools.lru_cache(maxsize=2048)
def _knobs_of(source: str) -> tuple[Knob, ...]:
    """Kept per source: a parent is proposed from many times, and finding its knobs walks its
    tree once per function (55 ms a proposal under a profiler, the engine's largest cost when
    32 Dask units asked it for candidates: bench/cluster_scale.py)."""
    try:
        tree = parse(source)
    except SyntaxError:
        return ()
    off = _Offsets(source.encode())
    jit = _jit_names(tree)
    # an autotuned kernel gets num_warps/num_stages from its Configs: passing them at the launch
    # too fails ("got multiple values for keyword argument"), so only its Configs are knobs
    autotuned = _decorated(tree, ("autotune",))
    knobs: list[Knob] = []
    for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name not in jit]:
        knobs += _function_knobs(func, jit, autotuned, off)
    knobs += _config_knobs(tree, off)
    knobs.sort(key=lambda k: k.span[0] if k.span else k.insert_at)
    return tuple(knobs)


def _function_knobs(func: ast.FunctionDef, jit: set[str], autotuned: set[str], off: _Offsets) -> list[Knob]:
    """A wrapper's launch arguments, and the power-of-two constants it assigns to names it passes."""
    launches = [c for c in ast.walk(func) if isinstance(c, ast.Call) and isinstance(c.func, ast.Subscript)
                and isinstance(c.func.value, ast.Name) and c.func.value.id in jit]
    launches.sort(key=lambda c: (c.lineno, c.col_offset))
    passed_names: set[str] = set()
    knobs: list[Knob] = []
    for i, call in enumerate(launches):
        knobs += _launch_knobs(func.name, i, call, autotuned, off, passed_names)
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in passed_names and _is_pow2(_int_const(node.value))):
            knobs.append(Knob(("assign", func.name, node.targets[0].id), "block", node.value.value,
                              off.span(node.value)))
    return knobs


def _launch_knobs(func: str, i: int, call: ast.Call, autotuned: set[str], off: _Offsets,
                  passed_names: set[str]) -> list[Knob]:
    """The i-th launch's constant keywords (and num_warps/num_stages to add where it has none);
    the names it passes go into `passed_names`."""
    kernel = call.func.value.id  # the caller matched kernel[grid](...)
    given = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        if isinstance(kw.value, ast.Name):
            passed_names.add(kw.value.id)
        v = _int_const(kw.value)
        kind = kw.arg if kw.arg in ("num_warps", "num_stages") else "block"
        if v is not None and (kind != "block" or _is_pow2(v)):
            given[kw.arg] = Knob(("launch", func, kernel, i, kw.arg), kind, v, off.span(kw.value))
    passed_names.update(a.id for a in call.args if isinstance(a, ast.Name))
    # after the last argument: a trailing comma and the layout stay as they were
    last = max([*call.args, *call.keywords], key=lambda n: (n.end_lineno, n.end_col_offset), default=None)
    end = off.at(last.end_lineno, last.end_col_offset) if last else off.at(call.end_lineno,
                                                                        call.end_col_offset) - 1
    for name in ("num_warps", "num_stages"):
        if kernel not in autotuned and name not in given and not any(kw.arg == name for kw in call.keywords):
            given[name] = Knob(("launch", func, kernel, i, name), name, None, None, end)
    return list(given.values())


def _config_knobs(tree: ast.Module, off: _Offsets) -> list[Knob]:
    """Block sizes, num_warps and num_stages of every triton.Config, in source order."""
    configs = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and ast.unparse(c.func).endswith("Config")]
    configs.sort(key=lambda c: (c.lineno, c.col_offset))
    knobs = []
    for i, call in enumerate(configs):
        if call.args and isinstance(call.args[0], ast.Dict):
            for k, v in zip(call.args[0].keys, call.args[0].values):
                if isinstance(k, ast.Constant) and _is_pow2(_int_const(v)):
                    knobs.append(Knob(("config", i, k.value), "block", v.value, off.span(v)))
        for kw in call.keywords:
            if kw.arg in ("num_warps", "num_stages") and _int_const(kw.value) is not None:
                knobs.append(Knob(("config", i, kw.arg), kw.arg, kw.value.value, off.span(kw.value)))
    return knobs


def apply(source: str, changes: dict[Knob, int]) -> str | None:
    """The source with each knob set to its new value; None if the result does not parse."""
    data = source.encode()
    edits = []
    for knob, value in changes.items():
        if knob.span:
            edits.append((knob.span[0], knob.span[1], str(value)))
        else:
            sep = "" if data[:knob.insert_at].rstrip().endswith(b"(") else ", "
            edits.append((knob.insert_at, knob.insert_at, f"{sep}{knob.kind}={value}"))
    for start, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        data = data[:start] + text.encode() + data[end:]
    out = data.decode()
    try:
        parse(out)
    except SyntaxError:
        return None
    return out


def _describe(changes: dict[Knob, int]) -> str:
    return ", ".join(f"{k.key[-1]} {k.value if k.value is not None else 'default'}->{v}"
                     for k, v in changes.items())


class KnobMutation(Operator):
    """Changes one or two knobs of one parent to a neighbouring value."""

    name = "knob_mutation"
    arity = 1

    def propose(self, parents: list[Parent], context: Context, rng: random.Random) -> Child | None:
        source = parents[0].source
        knobs = [k for k in find_knobs(source) if k.choices()]
        if not knobs:
            return None
        chosen = rng.sample(knobs, min(len(knobs), rng.choice((1, 1, 2))))
        changes = {k: rng.choice(k.choices()) for k in chosen}
        out = apply(source, changes)
        return Child(out, self.name, _describe(changes)) if out else None


class KnobCrossover(Operator):
    """The first parent's kernel with each shared knob taken from either parent at random."""

    name = "knob_crossover"
    arity = 2

    def propose(self, parents: list[Parent], context: Context, rng: random.Random) -> Child | None:
        a, b = parents[0].source, parents[1].source
        theirs = {k.key: k for k in find_knobs(b)}
        changes = {}
        for k in find_knobs(a):
            other = theirs.get(k.key)
            if other is not None and other.value is not None and other.value != k.value and rng.random() < 0.5:
                changes[k] = other.value
        if not changes:
            return None
        out = apply(a, changes)
        return Child(out, self.name, "from the second parent: " + _describe(changes)) if out else None
