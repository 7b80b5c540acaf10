"""On a GPU, the kernels a clean child times are compiled in that child from the candidate's source
(fitness.clean.kernel_source: the @triton.jit definitions alone, nothing else of the module runs),
for the build each recorded launch names: its constexprs (an autotuner's pick included) and
`num_warps`/`num_stages`/`num_ctas`/`maxnreg` as its metadata records them.

The recorded binary is the candidate process's word: a binary planted in that process's Triton
cache (or written by hand) would be timed as if the archived source had made it. So no binary made
in a candidate's process runs in a clean child; the description recorded with a launch only says
which build to make. Triton compiles into the clean cache, which only clean children write, so a
second candidate with the same kernel reuses the build. A kernel that cannot be built from its
source alone (its body reaches a helper the engine does not build) is the replay's limit, named.
"""
from __future__ import annotations

import json
from typing import Any

from fitness.clean.compiled import NotReplayable, ReplayError
from fitness.clean.trace_values import triton_dtype, triton_dtype_names

_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def kernel_named(built: dict[str, Any], name: object) -> Any:
    """The JIT function the engine built whose name is the recorded kernel's; NotReplayable if none."""
    fn = next((f for key, f in built.items() if key.rpartition(":")[2] == name), None)
    if fn is None:
        raise NotReplayable(f"kernel {str(name)[:80]} is not a top-level @triton.jit function the engine can build "
                            "from the candidate's source alone")
    return fn


def compile_for_launch(desc: dict, fn: Any, args: list, grid: tuple) -> Any:
    """`fn` compiled here for the build `desc` records, on this launch's arguments (whose pointers
    and integers give Triton the same specialization the recorded launch had)."""
    try:
        meta = json.loads(desc["metadata"])
        constants = {json.dumps(json.loads(k)): v for k, v in desc["constants"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ReplayError("unreadable kernel description in trace") from None
    names = list(getattr(fn, "arg_names", []))
    if len(names) != len(args):
        raise ReplayError(f"a launch passes {len(args)} arguments to kernel {fn.__name__} of {len(names)}")
    constexprs = set(getattr(fn, "constexprs", ()))
    # a constexpr parameter takes its recorded value; so does an argument Triton specialized into a
    # constant (an integer equal to 1: the launch passes None for it)
    call = [_constant(constants, i, n) if i in constexprs or (a is None and _recorded(constants, i, n)) else a
            for i, (n, a) in enumerate(zip(names, args))]
    options = {k: meta[k] for k in _OPTIONS if isinstance(meta.get(k), int) and not isinstance(meta.get(k), bool)}
    try:
        kernel = fn.warmup(*call, grid=grid, **options)
        getattr(kernel, "_init_handles", lambda: None)()  # loads the module now, not inside a timed region
        return kernel
    except Exception as e:  # noqa: BLE001 - what Triton says of a build it cannot make here
        raise NotReplayable(f"kernel {fn.__name__} does not compile from its source alone for the recorded "
                            f"build ({type(e).__name__}: {str(e)[-400:]})") from None


def _key(constants: dict, index: int, name: str) -> str | None:
    """Where the recorded build keeps a parameter's constant: by its position (Triton 3.x) or its name."""
    return next((k for k in (json.dumps([index]), json.dumps(index), json.dumps(name)) if k in constants), None)


def _recorded(constants: dict, index: int, name: str) -> bool:
    return _key(constants, index, name) is not None


def _constant(constants: dict, index: int, name: str) -> Any:
    """A constexpr's recorded value, as the kernel takes it."""
    key = _key(constants, index, name)
    if key is None:
        raise ReplayError(f"the recorded build gives no value for the constexpr {name!r}")
    return _as_triton(constants[key])


def _as_triton(v: Any) -> Any:
    """A recorded constant as the kernel takes it: a dtype's name ('fp32') as that Triton dtype."""
    return triton_dtype(v) if isinstance(v, str) and v in triton_dtype_names() else v
