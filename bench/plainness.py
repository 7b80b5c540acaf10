"""How plain the code is: `python bench/plainness.py` prints the largest module, the longest
function and the longest parameter list of the project's packages, every one over the limits,
and every public function of the engine's layers that lacks a type annotation.

Limits (tests/test_plainness.py holds the tree to them): a module at most 400 lines, a function
at most 50, at most 7 parameters (self aside). Triton kernels (`@triton.jit`) are left out of the
parameter count: a kernel takes each pointer and stride as its own argument, as Triton wants.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("evolve", "operators", "fitness", "archives", "suites", "run.py")
ANNOTATED = ("evolve", "archives", "fitness")  # every public function annotated, mypy clean
MAX_MODULE, MAX_FUNCTION, MAX_PARAMS = 400, 50, 7


@dataclass(frozen=True)
class Finding:
    where: str  # path:line name
    size: int  # lines, or parameters


def modules(roots: tuple[str, ...] = PACKAGES) -> list[Path]:
    out: list[Path] = []
    for r in roots:
        p = ROOT / r
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def _is_kernel(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
              *([a.kwarg] if a.kwarg else [])]
    return params[1:] if params and params[0].arg in ("self", "cls") else params


def _functions(tree: ast.Module, public_only: bool = False):
    """(function, its qualified name, whether it is public) for every def in the module."""
    def walk(node, prefix: str, public: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                pub = public and not child.name.startswith("_")
                yield child, prefix + child.name, pub
                yield from walk(child, prefix + child.name + ".", False)  # nested: never public
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".", public and not child.name.startswith("_"))
    yield from walk(tree, "", True)


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def measure(paths: list[Path]) -> dict[str, list[Finding]]:
    found: dict[str, list[Finding]] = {"modules": [], "functions": [], "params": []}
    for path in paths:
        src = path.read_text()
        rel = _rel(path)
        found["modules"].append(Finding(str(rel), src.count("\n")))
        for fn, name, _ in _functions(ast.parse(src)):
            where = f"{rel}:{fn.lineno} {name}"
            found["functions"].append(Finding(where, (fn.end_lineno or fn.lineno) - fn.lineno + 1))
            if not _is_kernel(fn):
                found["params"].append(Finding(where, len(_params(fn))))
    return found


def unannotated(paths: list[Path]) -> list[str]:
    """Public functions (and methods of public classes) of these modules with a parameter or
    the return type unannotated (__init__ needs no return type; dunders other than it are left out)."""
    out = []
    for path in paths:
        rel = _rel(path)
        for fn, name, public in _functions(ast.parse(path.read_text())):
            if not public or (fn.name.startswith("__") and fn.name != "__init__"):
                continue
            missing = [p.arg for p in _params(fn) if p.annotation is None]
            if fn.returns is None and fn.name != "__init__":
                missing.append("return")
            if missing:
                out.append(f"{rel}:{fn.lineno} {name} ({', '.join(missing)})")
    return out


def over_limits(found: dict[str, list[Finding]]) -> list[str]:
    limits = {"modules": MAX_MODULE, "functions": MAX_FUNCTION, "params": MAX_PARAMS}
    return [f"{kind[:-1]} {f.where}: {f.size}" for kind, limit in limits.items() for f in found[kind]
            if f.size > limit]


def main() -> int:
    found = measure(modules())
    for kind, unit in (("modules", "lines"), ("functions", "lines"), ("params", "parameters")):
        top = max(found[kind], key=lambda f: f.size)
        print(f"largest of {len(found[kind])} {kind}: {top.where} ({top.size} {unit})")
    over = over_limits(found)
    missing = unannotated(modules(ANNOTATED))
    print(f"over the limits ({MAX_MODULE} lines a module, {MAX_FUNCTION} a function, {MAX_PARAMS} parameters): "
          f"{len(over)}")
    print("\n".join("  " + x for x in over))
    print(f"public functions of {', '.join(ANNOTATED)} without full annotations: {len(missing)}")
    print("\n".join("  " + x for x in missing))
    return 1 if over or missing else 0


if __name__ == "__main__":
    sys.exit(main())
