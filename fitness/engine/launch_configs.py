"""Which build of each kernel a timing ran: its constexprs (block sizes and the like), num_warps
and num_stages, read from the compiled kernels a timed trace launches (fitness.clean.replayer).

An autotuned kernel is tuned in the candidate's own process, during its correctness cases, and
its trace keeps the binary of the config the autotuner picked there for that shape; the replay
that is timed launches exactly those binaries. So the config named here is the one timed. The
names and values come from the candidate's process, like the rest of the trace: they label what
ran, they decide nothing (the binary and its metadata are what the replay launches)."""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fitness.clean.compiled import plain_constant


@dataclass(frozen=True)
class KernelConfig:
    """One compiled kernel as a timing launched it, and the timed shapes it ran on."""

    kernel: str
    constexprs: tuple[tuple[str, Any], ...]  # (name, value) in the kernel's parameter order
    num_warps: int | None = None
    num_stages: int | None = None
    extra: tuple[tuple[str, Any], ...] = ()  # num_ctas, maxnreg where not Triton's defaults
    shapes: tuple[str, ...] = ()  # the timed shapes whose traces launched it

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> KernelConfig:
        """One as a verdict's JSON keeps it (the archive's `evaluations.verdict`)."""
        return cls(str(d["kernel"]), tuple((str(k), v) for k, v in d["constexprs"]), d.get("num_warps"),
                   d.get("num_stages"), tuple((str(k), v) for k, v in d.get("extra", ())), tuple(d.get("shapes", ())))

    @classmethod
    def all_from_verdict(cls, verdict: Mapping[str, Any]) -> list[KernelConfig]:
        """A stored verdict's builds (none before they were recorded); an unreadable one is left out."""
        out = []
        for d in verdict.get("configs") or ():
            try:
                out.append(cls.from_record(d))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        return out

    def build(self) -> str:
        """The kernel and its config, e.g. `_add(BLOCK=1024, num_warps=4, num_stages=3)`."""
        knobs = [f"{k}={v}" for k, v in self.constexprs]
        knobs += [f"{k}={v}" for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages))
                  if v is not None]
        knobs += [f"{k}={v}" for k, v in self.extra]
        return f"{self.kernel}({', '.join(knobs)})"


def trace_configs(trace: Mapping[str, Any]) -> list[KernelConfig]:
    """The compiled kernels a trace launches, each once, in the order of their first launch
    (none for an interpreted trace: under the interpreter nothing is compiled or timed)."""
    kernels = trace.get("kernels")
    if not isinstance(kernels, Mapping):
        return []
    seen: list[str] = []
    for ev in trace.get("events") or ():
        key = ev.get("kernel") if isinstance(ev, Mapping) and ev.get("kind") == "launch" else None
        if isinstance(key, str) and key in kernels and key not in seen:
            seen.append(key)
    return [build_of(kernels[key]) for key in seen if isinstance(kernels[key], Mapping)]


def timed_configs(traces: Iterable[tuple[str, Mapping[str, Any]]]) -> list[KernelConfig]:
    """(shape, trace) of every timed shape -> each distinct kernel build with the shapes it ran on."""
    merged: dict[KernelConfig, list[str]] = {}
    for shape, trace in traces:
        for c in trace_configs(trace):
            merged.setdefault(c, []).append(shape)
    return [replace(c, shapes=tuple(shapes)) for c, shapes in merged.items()]


def describe(configs: list[KernelConfig], shapes: int) -> str:
    """A verdict's words for them: every build, and where it ran unless on all `shapes`."""
    parts = [c.build() + ("" if len(c.shapes) == shapes else f" on {', '.join(c.shapes)}") for c in configs]
    return "timed kernels, as compiled (an autotuner's pick included): " + "; ".join(parts) if parts else ""


def build_of(desc: Mapping[str, Any]) -> KernelConfig:
    """A recorded compiled kernel's build: name, constexprs, options; what Triton specialized on
    its own (an integer equal to 1, a pointer's alignment) is no part of it."""
    names = list(desc.get("arg_names") or [])
    declared = desc.get("constexpr_args")  # the kernel's tl.constexpr parameters, where recorded
    declared = {d for d in declared if isinstance(d, str)} if isinstance(declared, list) else None
    signature = desc.get("signature") or {}
    values: dict[str, Any] = {}
    for raw, value in (desc.get("constants") or {}).items():
        name = _constant_name(raw, names)
        if name is not None and plain_constant(value) and (
                name in declared if declared is not None else signature.get(name) == "constexpr"):
            values[name] = value
    order = {n: i for i, n in enumerate(names) if isinstance(n, str)}
    constexprs = tuple(sorted(values.items(), key=lambda kv: order.get(kv[0], len(order))))
    meta = _loads(desc.get("metadata"))
    meta = meta if isinstance(meta, dict) else {}
    extra = tuple((k, _int(meta.get(k))) for k, default in (("num_ctas", 1), ("maxnreg", None))
                  if meta.get(k, default) != default)
    name = str(desc.get("name", ""))
    return KernelConfig(name if name.isidentifier() else "?", constexprs, _int(meta.get("num_warps")),
                        _int(meta.get("num_stages")), extra)


def _constant_name(raw: object, names: list) -> str | None:
    """A constant's parameter name: its key is an index path ([3]) in Triton 3.3 and later, a name before."""
    key = _loads(raw)
    if isinstance(key, list) and len(key) == 1 and isinstance(key[0], int) and 0 <= key[0] < len(names):
        key = names[key[0]]
    return key if isinstance(key, str) and key.isidentifier() else None


def _loads(text: object) -> Any:
    """JSON text parsed; None where it is none (the trace comes from the candidate's process)."""
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _int(v: object) -> int | None:
    """A launch number as recorded, where it is one (the trace comes from the candidate's process)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None
