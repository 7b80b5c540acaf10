"""A compiled Triton kernel as a trace records it (fitness.candidate.recorder): what a process that never saw
the candidate needs to launch it again, the checks that keep the description from becoming code,
and loading and launching it in the replaying process."""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from types import SimpleNamespace
from typing import Any

import torch

from fitness.common.flags import NOT_REPLAYABLE


class ReplayError(Exception):
    """The trace cannot be replayed or did not replay as recorded; the message says why."""


class NotReplayable(ReplayError):
    """What the replay cannot model (an op or pattern of an honest call): the engine's limit, never
    the candidate's failure. Its message starts with NOT_REPLAYABLE, which the verdict, validate's
    table and record read as a status of its own."""

    def __init__(self, what: str):
        super().__init__(NOT_REPLAYABLE + what)


def describe_compiled(kernel: Any) -> dict:
    """What a process that never saw the candidate needs to launch a compiled kernel again."""
    group = getattr(kernel, "metadata_group", None) or {}
    meta = next((open(p).read() for name, p in group.items() if name.endswith(".json")), None)
    if meta is None:
        meta = json.dumps({k: (v._asdict() if hasattr(v, "_asdict") else v)
                           for k, v in kernel.metadata._asdict().items()}, default=list)
    src = kernel.src
    fn = getattr(src, "fn", None)
    arg_names = list(getattr(fn, "arg_names", []) or [])
    constants = {json.dumps(list(k) if isinstance(k, tuple) else k): _plain(v)
                 for k, v in dict(getattr(src, "constants", {}) or {}).items()}
    signature = {str(k): str(v) for k, v in dict(src.signature).items()}
    binary = kernel.kernel if isinstance(kernel.kernel, bytes) else str(kernel.kernel).encode()
    return {"name": kernel.name, "metadata": meta, "binary": torch.frombuffer(bytearray(binary), dtype=torch.uint8),
            "signature": signature, "constants": constants, "arg_names": arg_names,
            "constexpr_args": [arg_names[i] for i in getattr(fn, "constexprs", ()) if i < len(arg_names)],
            "module": getattr(fn, "__module__", "") or getattr(fn, "module", "")}


def _plain(v: object) -> object:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    inner = getattr(v, "value", v)
    return inner if isinstance(inner, (bool, int, float, str)) or inner is None else str(inner)


_LOADED: dict[str, Any] = {}  # this process's kernels (CompiledKernel) by their description's digest


def load_compiled(desc: dict) -> Any:
    """A Triton CompiledKernel rebuilt from a recorded description, through Triton's own loader;
    once per process for each distinct kernel (a candidate's shapes and cases share theirs)."""
    try:
        digest = hashlib.sha256(json.dumps([desc["metadata"], desc["signature"], desc["constants"],
                                            desc["arg_names"], desc["name"]], sort_keys=True).encode()
                                + bytes(desc["binary"].numpy().tobytes())).hexdigest()
    except (KeyError, TypeError, AttributeError, ValueError):
        raise ReplayError("unreadable kernel description in trace") from None
    if digest not in _LOADED:
        _LOADED[digest] = _load_compiled(desc)
    return _LOADED[digest]


def _load_compiled(desc: dict) -> Any:
    from triton.backends.compiler import GPUTarget  # noqa: F401 - imported for CompiledKernel's json
    from triton.compiler.compiler import CompiledKernel

    try:
        meta = json.loads(desc["metadata"])
        name = str(meta.get("name", desc["name"]))
        ext = "hsaco" if meta.get("target", {}).get("backend") == "hip" else "cubin"
    except (ValueError, AttributeError):
        raise ReplayError("unreadable kernel metadata in trace") from None
    if not name.replace("_", "").isalnum():
        raise ReplayError("bad kernel name in trace")
    _check_signature(desc)
    folder = tempfile.mkdtemp(prefix="te-replay-")
    paths = {f: os.path.join(folder, f) for f in (f"{name}.json", f"{name}.{ext}")}
    with open(paths[f"{name}.json"], "w") as f:
        f.write(desc["metadata"])
    with open(paths[f"{name}.{ext}"], "wb") as fb:
        fb.write(bytes(desc["binary"].numpy().tobytes()))
    constants = {}
    for k, v in desc["constants"].items():
        key = json.loads(k)
        constants[tuple(key) if isinstance(key, list) else key] = v
    src = SimpleNamespace(signature=dict(desc["signature"]), constants=constants,
                          fn=SimpleNamespace(arg_names=list(desc["arg_names"]), launch_metadata=None), attrs={})
    try:
        return CompiledKernel(src, paths, name)
    except Exception as e:  # noqa: BLE001 - whatever Triton says about a malformed kernel
        raise ReplayError(f"the recorded kernel does not load: {e}") from None


_TYPE = re.compile(r"[\[\]*A-Za-z0-9_, ]{1,128}")  # "*fp32", "i32", "constexpr", "[*fp16,i32]"
_IDENT = re.compile(r"\w{1,128}")  # an argument's name (or index)
_CONST = re.compile(r"[\w.\[\]*, ]{0,128}")  # "fp32", "triton.language.float32", ""


def _check_signature(desc: dict) -> None:
    """Triton writes the C launcher for a kernel from its signature, and a clean child builds it
    (and keeps it in the clean cache): only type names, identifiers and plain constants get that
    far, never text that could become code."""
    sig, names = desc.get("signature"), desc.get("arg_names")
    if not isinstance(sig, dict) or not isinstance(names, list):
        raise ReplayError("unreadable kernel signature in trace")
    if not all(isinstance(k, str) and _IDENT.fullmatch(k) for k in [*sig, *names]):
        raise ReplayError("a kernel argument name in the trace is not an identifier")
    if not all(isinstance(t, str) and _TYPE.fullmatch(t) for t in sig.values()):
        raise ReplayError("a kernel argument type in the trace is not a type name")
    for k, v in (desc.get("constants") or {}).items():
        if not isinstance(k, str) or not plain_constant(v):
            raise ReplayError("a kernel constant in the trace is not a plain value")


def plain_constant(v: object) -> bool:
    """A kernel constant that can be neither code nor noise: None, a number, a short dtype-like name."""
    return v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and bool(_CONST.fullmatch(v)))


def launch_compiled(kernel: Any, grid: tuple, args: list) -> None:
    from triton.runtime.driver import driver

    device = driver.active.get_current_device()
    stream = driver.active.get_current_stream(device)
    kernel.run(grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed_metadata, None, None, None, *args)


def constants_dropped(kernel: Any, args: list) -> list:
    """A launch's arguments with None where the build made the parameter a constant (a constexpr,
    or an integer equal to 1 that Triton specialized away): the launcher takes no value there."""
    try:
        kinds = [str(k) for k in dict(kernel.src.signature).values()]
    except (AttributeError, TypeError):
        raise ReplayError("the recorded kernel has no readable signature") from None
    return [None if i < len(kinds) and kinds[i] == "constexpr" else a for i, a in enumerate(args)]


def check_launch_args(kernel: Any, args: list) -> None:
    """A recorded launch's arguments against the kernel's own signature: every pointer an engine
    buffer (a tensor the replay made from the recorded layout), never a number, so the kernel
    touches only memory the engine allocated; every scalar a plain number."""
    try:
        kinds = [str(k) for k in dict(kernel.src.signature).values()]
    except (AttributeError, TypeError):
        raise ReplayError("the recorded kernel has no readable signature") from None
    if len(args) != len(kinds):
        raise ReplayError(f"a launch passes {len(args)} arguments to a kernel of {len(kinds)}")
    for i, (kind, a) in enumerate(zip(kinds, args)):
        _check_arg(kind, a, i)


def _check_arg(kind: str, a: object, i: int) -> None:
    if kind.startswith("[") and kind.endswith("]"):  # a tuple argument: its parts by their own kinds
        parts = [k.strip() for k in kind[1:-1].split(",") if k.strip()]
        if not isinstance(a, list) or len(a) != len(parts):
            raise ReplayError(f"argument {i} of a launch is not the tuple its kernel takes")
        for k, v in zip(parts, a):
            _check_arg(k, v, i)
    elif kind == "constexpr":
        if a is not None:
            raise ReplayError(f"argument {i} of a launch is a constant of the kernel, yet the trace passes a value")
    elif kind.startswith("*"):
        if type(a) is not torch.Tensor:
            raise ReplayError(f"argument {i} of a launch is a pointer ({kind}) and the trace passes "
                              f"a {type(a).__name__}, not a buffer of the replay")
    elif type(a) not in (bool, int, float):
        raise ReplayError(f"argument {i} of a launch is a scalar ({kind}) and the trace passes a {type(a).__name__}")
