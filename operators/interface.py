"""What a kernel module must provide, as prompts say it: the entry point's form (a function, a
class such as an autograd.Function, or several names, ROCm's "a,b") and, for the instruction
setting, the interface alone: signatures taken from the starting kernel by ast (never a body),
the dtypes and the tuning shapes. The LLM must never see the code it would be compared with."""
from __future__ import annotations

import ast
from typing import Any

from suites.ast_lock import parse


def entry_names(entry: str) -> list[str]:
    return [e.strip() for e in entry.split(",") if e.strip()]


def _top_level(source: str) -> dict[str, ast.stmt]:
    try:
        tree = parse(source) if source else None
    except SyntaxError:
        tree = None
    return {n.name: n for n in (tree.body if tree else [])
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def entry_phrase(entry: str, source: str = "") -> str:
    """'the function `f`', 'the class `X`', 'the functions `a` and `b`': what the module must
    define. The form comes from the starting kernel where it defines the name, else from the
    name (a capitalized name is a class, by Python's convention)."""
    defs = _top_level(source)
    kinds = []
    for name in entry_names(entry) or [entry]:
        node = defs.get(name)
        is_class = isinstance(node, ast.ClassDef) if node is not None else name[:1].isupper()
        kinds.append(("class", name) if is_class else ("function", name))
    if len({k for k, _ in kinds}) == 1:
        kind = kinds[0][0]
        names = [f"`{n}`" for _, n in kinds]
        plural = {"class": "classes", "function": "functions"}[kind] if len(names) > 1 else kind
        return f"the {plural} {_and(names)}"
    return _and([f"the {k} `{n}`" for k, n in kinds])


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _signature(node: ast.stmt) -> str:
    """The def or class line (and a class's method lines), with no body."""
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in node.bases)
        methods = [_signature(m) for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        body = [f"    {line}" for m in methods for line in m.splitlines()] or ["    ..."]
        return "\n".join([f"class {node.name}({bases}):", *body])
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    decorators = [f"@{ast.unparse(d)}" for d in node.decorator_list if ast.unparse(d) in ("staticmethod",
                                                                                            "classmethod")]
    ret = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return "\n".join([*decorators, f"def {node.name}({ast.unparse(node.args)}){ret}: ..."])


def describe_interface(task: Any) -> str:
    """The instruction setting's view of the task: signatures, dtypes, shapes; no code body."""
    defs = _top_level(task.start_source)
    sigs = [_signature(defs[n]) for n in entry_names(task.entry) if n in defs]
    lines = [f"The module must define {entry_phrase(task.entry, task.start_source)}."]
    if sigs:
        lines += ["Signatures (bodies are yours to write):", "```python", *sigs, "```"]
    if task.dtypes and task.dtypes != ("given",):  # "given": a script task's inputs carry their own
        lines.append(f"Input dtypes: {', '.join(task.dtypes)}; outputs as the instruction describes them.")
    shapes = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in task.shapes.tuning[:4])
    if shapes:
        lines.append(f"Example sizes (it must work for any size): {shapes}.")
    return "\n".join(lines)
