"""The closed set of tensor steps a replay may run besides the recorded kernels (fitness.clean.replayer).

A trace names its torch ops by strings the candidate's process wrote. Nothing here looks those
strings up in torch (no getattr into torch.ops, modules or attributes): a recorded op's
"name.overload" is a key into PRIMITIVES, the engine's own table, and each entry's arguments are
checked against its schema before the engine's own implementation runs. An op that is not in the
table fails the replay.

Whether a step is work is decided by what it did to memory, not by its name: a view is free only
when its result lies in its source's storage (checked after it ran), an allocation or a constant
fill writes nothing read from a tensor, and anything that writes values read from tensor memory
(a copy, a conversion, arithmetic) is work, its elements counted.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from fitness.clean.compiled import ReplayError

# every dtype and enum a trace may name, by the name the recorder writes (never getattr on torch)
DTYPES: dict[str, torch.dtype] = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64)}
ENUMS: dict[str, object] = {"strided": torch.strided, "contiguous_format": torch.contiguous_format,
                            "preserve_format": torch.preserve_format, "channels_last": torch.channels_last}

# what a step does to memory; "view" is re-checked after it ran (a result outside its source's
# storage is counted as a copy); "read" hands a Python number back to the host and writes nothing
VIEW, ALLOC, FILL, COPY, READ = "view", "alloc", "fill", "copy", "read"


class Device:
    """A decoded device argument: the replay's own device, whatever the trace said."""


@dataclass(frozen=True)
class Prim:
    """One primitive: its positional argument kinds (a trailing '?' kind may be left out), the
    keywords it accepts with their kinds, its effect on memory and the engine's implementation."""
    args: tuple[str, ...]
    effect: str
    impl: Callable[..., Any]
    kwargs: dict[str, str] = field(default_factory=dict)
    inplace: bool = False  # writes its first argument (and returns it)


# the keywords a factory or a *_like step may record (the engine passes on dtype and memory format only)
_FACTORY = {"dtype": "dtype?", "layout": "layout?", "device": "device?", "pin_memory": "bool?",
            "memory_format": "enum?"}


def _f(kw: dict) -> dict:
    """Factory keywords as the engine passes them: its own device, a dtype from DTYPES."""
    return {k: v for k, v in kw.items() if k in ("dtype", "memory_format") and v is not None}


def _dev(kw: dict, device: str) -> dict:
    return {**_f(kw), "device": device}


def _slice(t: torch.Tensor, dim: int | None = 0, start: int | None = None, end: int | None = None,
           step: int | None = 1) -> torch.Tensor:
    index = [slice(None)] * t.dim()
    index[dim or 0] = slice(start, end, step or 1)
    return t[tuple(index)]


def _arith(op: Callable[..., Any]) -> Callable[..., Any]:
    def run(device: str, a: torch.Tensor, b: Any, **kw: Any) -> torch.Tensor:
        return op(a, b, **({"alpha": kw["alpha"]} if kw.get("alpha") is not None else {}))
    return run


def _reduce(op: Callable[..., Any]) -> Callable[..., Any]:
    """A reduction over dims (all of them when none is given), as aten records amax/sum/mean."""
    def run(device: str, t: torch.Tensor, dims: list[int] | None = None, keep: bool | None = False,
            **kw: Any) -> torch.Tensor:
        extra = {"dtype": kw["dtype"]} if kw.get("dtype") is not None else {}
        if not dims:
            return op(t, **extra) if not keep else op(t, dim=tuple(range(t.dim())), keepdim=True, **extra)
        return op(t, dim=tuple(dims), keepdim=bool(keep), **extra)
    return run


def _by_dim(op: Callable[..., Any]) -> Callable[..., Any]:
    """max.dim / min.dim: values and indices along one dim."""
    def run(device: str, t: torch.Tensor, dim: int, keep: bool | None = False) -> tuple:
        return tuple(op(t, dim, bool(keep)))
    return run


def _sorted(device: str, t: torch.Tensor, dim: int | None = -1, descending: bool | None = False) -> tuple:
    return tuple(torch.sort(t, dim=-1 if dim is None else dim, descending=bool(descending)))


def _topk(device: str, t: torch.Tensor, k: int, dim: int | None = -1, largest: bool | None = True,
          is_sorted: bool | None = True) -> tuple:
    return tuple(torch.topk(t, k, -1 if dim is None else dim, largest is not False, is_sorted is not False))


def _norm(device: str, t: torch.Tensor, order: Any = 2, dims: list[int] | None = None, keep: bool | None = False,
          **k: Any) -> torch.Tensor:
    return torch.linalg.vector_norm(t, 2 if order is None else order, dims or None, bool(keep), **_f(k))


# indexing, padding, sorting and row-wise math a wrapper does around its kernels (counted as work)
_GATHER: dict[str, Prim] = {
    "lift_fresh.default": Prim(("T",), VIEW, lambda d, t: t),  # torch.tensor(...): its values are a snapshot
    "constant_pad_nd.default": Prim(("T", "ints", "num?"), COPY,
                                    lambda d, t, pad, v=0: torch.nn.functional.pad(t, pad, value=v or 0)),
    "index_select.default": Prim(("T", "int", "T"), COPY, lambda d, t, dim, i: torch.index_select(t, dim, i)),
    "gather.default": Prim(("T", "int", "T"), COPY, lambda d, t, dim, i, **k: torch.gather(t, dim, i),
                           {"sparse_grad": "bool?"}),
    # aten's None in the index list takes that dim whole (x[:, i] records [None, i]); Python's None adds a dim
    "index.Tensor": Prim(("T", "Tidx"), COPY, lambda d, t, idx: t[tuple(slice(None) if i is None else i for i in idx)]),
    "masked_fill.Scalar": Prim(("T", "T", "num"), COPY, lambda d, t, m, v: t.masked_fill(m, v)),
    "masked_fill_.Scalar": Prim(("T", "T", "num"), COPY, lambda d, t, m, v: t.masked_fill_(m, v), inplace=True),
    "repeat.default": Prim(("T", "ints"), COPY, lambda d, t, r: t.repeat(r)),
    "flip.default": Prim(("T", "ints"), COPY, lambda d, t, dims: torch.flip(t, dims)),
    "max.dim": Prim(("T", "int", "bool?"), COPY, _by_dim(torch.max)),
    "min.dim": Prim(("T", "int", "bool?"), COPY, _by_dim(torch.min)),
    "sort.default": Prim(("T", "int?", "bool?"), COPY, _sorted),
    "topk.default": Prim(("T", "int", "int?", "bool?", "bool?"), COPY, _topk),
    "_softmax.default": Prim(("T", "int", "bool"), COPY, lambda d, t, dim, half: torch._softmax(t, dim, half)),
    "_log_softmax.default": Prim(("T", "int", "bool"), COPY,
                                 lambda d, t, dim, half: torch._log_softmax(t, dim, half)),
    "gelu.default": Prim(("T",), COPY, lambda d, t, **k: torch.nn.functional.gelu(
        t, approximate=k.get("approximate") or "none"), {"approximate": "gelu?"}),
    "var.correction": Prim(("T", "ints?"), COPY, lambda d, t, dims=None, **k: torch.var(
        t, dims, correction=k.get("correction", 1), keepdim=bool(k.get("keepdim"))),
        {"correction": "num?", "keepdim": "bool?"}),
    "linalg_vector_norm.default": Prim(("T", "num?", "ints?", "bool?"), COPY, _norm, {"dtype": "dtype?"}),
}

# add/sub/mul/div and their in-place forms (add_ ...); only add and sub take alpha
_BINARY: dict[str, Callable[..., Any]] = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


def _alpha(name: str) -> dict[str, str]:
    return {"alpha": "num?"} if name in ("add", "sub") else {}


# torch glue a TORCH_OPS task's wrapper runs around its kernels (quantize, scale, reduce, a matmul):
# counted as work like any copy, so only a task that allows torch work passes with them
_GLUE: dict[str, Prim] = {
    "div.Tensor_mode": Prim(("T", "T|num"), COPY, lambda d, a, b, **k: torch.div(a, b, rounding_mode=k.get(
        "rounding_mode")), {"rounding_mode": "mode?"}),
    "round.decimals": Prim(("T",), COPY, lambda d, t, **k: torch.round(t, decimals=k.get("decimals", 0)),
                           {"decimals": "int?"}),
    "pow.Tensor_Scalar": Prim(("T", "num"), COPY, lambda d, t, e: torch.pow(t, e)),
    "pow.Tensor_Tensor": Prim(("T", "T"), COPY, lambda d, t, e: torch.pow(t, e)),
    "maximum.default": Prim(("T", "T"), COPY, lambda d, a, b: torch.maximum(a, b)),
    "minimum.default": Prim(("T", "T"), COPY, lambda d, a, b: torch.minimum(a, b)),
    "where.self": Prim(("T", "T", "T"), COPY, lambda d, c, a, b: torch.where(c, a, b)),
    "clamp.default": Prim(("T", "num?", "num?"), COPY, lambda d, t, lo=None, hi=None: torch.clamp(t, lo, hi)),
    "clamp_min.default": Prim(("T", "num"), COPY, lambda d, t, lo: torch.clamp_min(t, lo)),
    "clamp_max.default": Prim(("T", "num"), COPY, lambda d, t, hi: torch.clamp_max(t, hi)),
    "amax.default": Prim(("T", "ints?", "bool?"), COPY, _reduce(torch.amax)),
    "amin.default": Prim(("T", "ints?", "bool?"), COPY, _reduce(torch.amin)),
    "sum.default": Prim(("T",), COPY, lambda d, t, **k: torch.sum(t, **_f(k)), {"dtype": "dtype?"}),
    "sum.dim_IntList": Prim(("T", "ints?", "bool?"), COPY, _reduce(torch.sum), {"dtype": "dtype?"}),
    "mean.default": Prim(("T",), COPY, lambda d, t, **k: torch.mean(t, **_f(k)), {"dtype": "dtype?"}),
    "mean.dim": Prim(("T", "ints?", "bool?"), COPY, _reduce(torch.mean), {"dtype": "dtype?"}),
    "argmax.default": Prim(("T", "int?", "bool?"), COPY,
                           lambda d, t, dim=None, keep=False: torch.argmax(t, dim, bool(keep))),
    "cumsum.default": Prim(("T", "int"), COPY, lambda d, t, dim, **k: torch.cumsum(t, dim, **_f(k)),
                           {"dtype": "dtype?"}),
    "mm.default": Prim(("T", "T"), COPY, lambda d, a, b: torch.mm(a, b)),
    "bmm.default": Prim(("T", "T"), COPY, lambda d, a, b: torch.bmm(a, b)),
    "addmm.default": Prim(("T", "T", "T"), COPY, lambda d, c, a, b, **k: torch.addmm(
        c, a, b, beta=k.get("beta", 1), alpha=k.get("alpha", 1)), {"beta": "num?", "alpha": "num?"}),
    "cat.default": Prim(("Ts", "int?"), COPY, lambda d, ts, dim=0: torch.cat(ts, dim or 0)),
    "stack.default": Prim(("Ts", "int?"), COPY, lambda d, ts, dim=0: torch.stack(ts, dim or 0)),
    **{f"{n}_.Tensor": Prim(("T", "T|num"), COPY, _arith(getattr(torch.Tensor, f"{n}_")), _alpha(n), inplace=True)
       for n in _BINARY},
    **{f"{n}.{o}": Prim(("T", "T|num"), COPY, lambda d, a, b, fn=fn: fn(a, b)) for n, fn in {
        "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}.items()
        for o in ("Tensor", "Scalar")},
    "clamp_.default": Prim(("T", "num?", "num?"), COPY, lambda d, t, lo=None, hi=None: t.clamp_(lo, hi),
                           inplace=True),
    **_GATHER,
}


PRIMITIVES: dict[str, Prim] = {
    # allocation: a new storage, nothing written
    "empty.memory_format": Prim(("ints",), ALLOC, lambda d, s, **k: torch.empty(s, **_dev(k, d)), _FACTORY),
    "empty_like.default": Prim(("T",), ALLOC, lambda d, t, **k: torch.empty_like(t, **_f(k)), _FACTORY),
    "empty_strided.default": Prim(("ints", "ints"), ALLOC,
                                  lambda d, s, st, **k: torch.empty_strided(s, st, **_dev(k, d)), _FACTORY),
    "new_empty.default": Prim(("T", "ints"), ALLOC, lambda d, t, s, **k: t.new_empty(s, **_f(k)), _FACTORY),
    "new_empty_strided.default": Prim(("T", "ints", "ints"), ALLOC,
                                      lambda d, t, s, st, **k: t.new_empty_strided(s, st, **_f(k)), _FACTORY),
    # constant fills: values read from no tensor
    "zeros.default": Prim(("ints",), FILL, lambda d, s, **k: torch.zeros(s, **_dev(k, d)), _FACTORY),
    "ones.default": Prim(("ints",), FILL, lambda d, s, **k: torch.ones(s, **_dev(k, d)), _FACTORY),
    "full.default": Prim(("ints", "num"), FILL, lambda d, s, v, **k: torch.full(s, v, **_dev(k, d)), _FACTORY),
    "zeros_like.default": Prim(("T",), FILL, lambda d, t, **k: torch.zeros_like(t, **_f(k)), _FACTORY),
    "ones_like.default": Prim(("T",), FILL, lambda d, t, **k: torch.ones_like(t, **_f(k)), _FACTORY),
    "full_like.default": Prim(("T", "num"), FILL, lambda d, t, v, **k: torch.full_like(t, v, **_f(k)), _FACTORY),
    "new_zeros.default": Prim(("T", "ints"), FILL, lambda d, t, s, **k: t.new_zeros(s, **_f(k)), _FACTORY),
    "new_ones.default": Prim(("T", "ints"), FILL, lambda d, t, s, **k: t.new_ones(s, **_f(k)), _FACTORY),
    "new_full.default": Prim(("T", "ints", "num"), FILL, lambda d, t, s, v, **k: t.new_full(s, v, **_f(k)), _FACTORY),
    "arange.default": Prim(("num",), FILL, lambda d, e, **k: torch.arange(e, **_dev(k, d)), _FACTORY),
    "arange.start": Prim(("num", "num"), FILL, lambda d, s, e, **k: torch.arange(s, e, **_dev(k, d)), _FACTORY),
    "arange.start_step": Prim(("num", "num", "num"), FILL,
                              lambda d, s, e, st, **k: torch.arange(s, e, st, **_dev(k, d)), _FACTORY),
    "zero_.default": Prim(("T",), FILL, lambda d, t: t.zero_(), inplace=True),
    "fill_.Scalar": Prim(("T", "num"), FILL, lambda d, t, v: t.fill_(v), inplace=True),
    # views: the result must lie in its source's storage (checked after the step)
    "view.default": Prim(("T", "ints"), VIEW, lambda d, t, s: t.view(s)),
    "_unsafe_view.default": Prim(("T", "ints"), VIEW, lambda d, t, s: t.view(s)),
    "as_strided.default": Prim(("T", "ints", "ints", "int?"), VIEW,
                               lambda d, t, s, st, o=None: t.as_strided(s, st, o)),
    "expand.default": Prim(("T", "ints"), VIEW, lambda d, t, s, **k: t.expand(s), {"implicit": "bool?"}),
    "squeeze.default": Prim(("T",), VIEW, lambda d, t: t.squeeze()),
    "squeeze.dim": Prim(("T", "int"), VIEW, lambda d, t, i: t.squeeze(i)),
    "squeeze.dims": Prim(("T", "ints"), VIEW, lambda d, t, i: t.squeeze(tuple(i))),
    "unsqueeze.default": Prim(("T", "int"), VIEW, lambda d, t, i: t.unsqueeze(i)),
    "t.default": Prim(("T",), VIEW, lambda d, t: t.t()),
    "transpose.int": Prim(("T", "int", "int"), VIEW, lambda d, t, a, b: t.transpose(a, b)),
    "permute.default": Prim(("T", "ints"), VIEW, lambda d, t, p: t.permute(p)),
    "select.int": Prim(("T", "int", "int"), VIEW, lambda d, t, a, i: t.select(a, i)),
    "slice.Tensor": Prim(("T", "int?", "int?", "int?", "int?"), VIEW, lambda d, t, *a: _slice(t, *a)),
    "narrow.default": Prim(("T", "int", "int", "int"), VIEW, lambda d, t, a, s, n: t.narrow(a, s, n)),
    "alias.default": Prim(("T",), VIEW, lambda d, t: t.view(t.shape)),
    "detach.default": Prim(("T",), VIEW, lambda d, t: t.detach()),
    "split.Tensor": Prim(("T", "int", "int?"), VIEW, lambda d, t, n, dim=0: list(t.split(n, dim or 0))),
    "split_with_sizes.default": Prim(("T", "ints", "int?"), VIEW,
                                     lambda d, t, n, dim=0: list(t.split(n, dim or 0))),
    "unbind.int": Prim(("T", "int?"), VIEW, lambda d, t, dim=0: list(t.unbind(dim or 0))),
    # a scalar read to the host (.item()): no memory written, its number never reaches the replay
    "_local_scalar_dense.default": Prim(("T",), READ, lambda d, t: t.item()),
    # copies and arithmetic: values read from tensors, counted as work
    "clone.default": Prim(("T",), COPY, lambda d, t, **k: t.clone(**_f(k)), {"memory_format": "enum?"}),
    "copy_.default": Prim(("T", "T", "bool?"), COPY, lambda d, t, s, nb=False: t.copy_(s), inplace=True),
    "_to_copy.default": Prim(("T",), COPY, lambda d, t, **k: t.to(**_f(k), copy=True),
                             {**_FACTORY, "non_blocking": "bool?"}),
    **{f"{n}.Tensor": Prim(("T", "T|num"), COPY, _arith(fn), _alpha(n)) for n, fn in _BINARY.items()},
    "neg.default": Prim(("T",), COPY, lambda d, t: torch.neg(t)),
    **{k: Prim(("T",), COPY, fn) for k, fn in {
        "abs.default": lambda d, t: torch.abs(t), "exp.default": lambda d, t: torch.exp(t),
        "exp2.default": lambda d, t: torch.exp2(t), "log.default": lambda d, t: torch.log(t),
        "log2.default": lambda d, t: torch.log2(t), "sqrt.default": lambda d, t: torch.sqrt(t),
        "rsqrt.default": lambda d, t: torch.rsqrt(t), "reciprocal.default": lambda d, t: torch.reciprocal(t),
        "sigmoid.default": lambda d, t: torch.sigmoid(t), "tanh.default": lambda d, t: torch.tanh(t),
        "relu.default": lambda d, t: torch.relu(t), "silu.default": lambda d, t: torch.nn.functional.silu(t),
        "erf.default": lambda d, t: torch.erf(t), "sin.default": lambda d, t: torch.sin(t),
        "cos.default": lambda d, t: torch.cos(t), "round.default": lambda d, t: torch.round(t),
        "floor.default": lambda d, t: torch.floor(t), "ceil.default": lambda d, t: torch.ceil(t),
        "trunc.default": lambda d, t: torch.trunc(t), "sign.default": lambda d, t: torch.sign(t),
        "logical_not.default": lambda d, t: torch.logical_not(t),
        "max.default": lambda d, t: torch.max(t), "min.default": lambda d, t: torch.min(t)}.items()},
    **_GLUE,
}


def _is_num(v: object) -> bool:
    return type(v) in (bool, int, float)


_KINDS: dict[str, Callable[[object], bool]] = {
    "T": lambda v: type(v) is torch.Tensor,
    "ints": lambda v: isinstance(v, list) and all(type(i) is int for i in v),
    "int": lambda v: type(v) is int,
    "num": _is_num,
    "bool": lambda v: type(v) is bool,
    "dtype": lambda v: isinstance(v, torch.dtype),
    "layout": lambda v: v is torch.strided,
    "device": lambda v: isinstance(v, Device),
    "enum": lambda v: v in ENUMS.values(),
    "T|num": lambda v: type(v) is torch.Tensor or _is_num(v),
    "Ts": lambda v: isinstance(v, list) and len(v) > 0 and all(type(t) is torch.Tensor for t in v),
    "mode": lambda v: v in ("floor", "trunc"),
    "gelu": lambda v: v in ("none", "tanh"),
    "Tidx": lambda v: isinstance(v, list) and any(type(t) is torch.Tensor for t in v)
    and all(t is None or type(t) is torch.Tensor for t in v),
}


def _fits(kind: str, v: object) -> bool:
    if kind.endswith("?"):
        return v is None or _KINDS[kind[:-1]](v)
    return _KINDS[kind](v)


def check_args(key: str, prim: Prim, args: list, kwargs: dict) -> None:
    """The decoded arguments against the primitive's schema; a ReplayError names the mismatch."""
    need = sum(not k.endswith("?") for k in prim.args)
    if not need <= len(args) <= len(prim.args):
        raise ReplayError(f"{key} recorded with {len(args)} arguments, the engine's primitive takes "
                          f"{need} to {len(prim.args)}")
    for i, (kind, v) in enumerate(zip(prim.args, args)):
        if not _fits(kind, v):
            raise ReplayError(f"{key}: argument {i} is a {type(v).__name__}, the engine's primitive takes {kind}")
    for k, v in kwargs.items():
        allowed = prim.kwargs.get(k)
        if allowed is None or not _fits(allowed, v):
            raise ReplayError(f"{key}: keyword {k!r} ({type(v).__name__}) is not one the engine's primitive takes")
