"""The realistic corpus: LLM-style candidates for TritonBench tasks, one folder per task.

Each `bench/realistic/<task>/<name>.py` is a complete candidate module for the TritonBench task
named by its folder, written as a strong LLM answers the optimize prompt: autotune lists of 8-32
configs, persistent kernels, several launches per call, split reductions. Its docstring's first
line says the strategy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent

# Under the Triton interpreter (no GPU) the autotuner has no benchmarker ("0 active drivers"), so a
# CPU smoke run gives each autotuner a stand-in do_bench: it runs every config once (so each
# compiles and executes) and reports made-up times that vary by call, so different shapes pick
# different configs. Only for CPU: on a GPU the modules are evaluated exactly as written.
_INTERP_BENCH = '''

_interp_bench_calls = [0]


def _interp_bench(kernel_call, quantiles=None, **_):
    kernel_call()
    _interp_bench_calls[0] += 1
    t = float((_interp_bench_calls[0] * 7919) % 13 + 1)
    return [t, t, t] if quantiles else t
'''


@dataclass(frozen=True)
class Candidate:
    task: str
    name: str
    path: Path
    source: str
    strategy: str


def _strategy(source: str) -> str:
    m = re.match(r'\s*"""(?:Strategy:\s*)?(.*?)(?:\n\n|""")', source, re.S)
    return " ".join(m.group(1).split()) if m else ""


def load_corpus(tasks: list[str] | None = None, root: Path = CORPUS_DIR) -> list[Candidate]:
    """Every candidate under `root`, by task then name; `tasks` keeps only those tasks."""
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        if tasks is not None and folder.name not in tasks:
            continue
        for path in sorted(folder.glob("*.py")):
            source = path.read_text()
            found.append(Candidate(folder.name, path.stem, path, source, _strategy(source)))
    if tasks is not None:
        missing = sorted(set(tasks) - {c.task for c in found})
        if missing:
            raise ValueError(f"no candidates in {root} for task(s): {', '.join(missing)}")
    return found


def for_interpreter(source: str) -> str:
    """The module with every @triton.autotune given the stand-in benchmark (CPU smoke runs only)."""
    if "triton.autotune(" not in source:
        return source
    patched = re.sub(r"@triton\.autotune\(", "@triton.autotune(do_bench=_interp_bench, ", source)
    # the stand-in goes after the imports, before the first decorator that needs it
    at = patched.index("@triton.autotune(")
    head_end = patched.rfind("\n", 0, at)
    return patched[:head_end] + _INTERP_BENCH + "\n" + patched[head_end:]
