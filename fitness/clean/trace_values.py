"""Values a trace names that are not plain tensors or numbers, as the replay makes them
(fitness.clean.replayer): Triton dtypes and reinterpreted tensors under their Triton names, the
specialization Triton would make of a launch's arguments, a tensor's storage as bytes."""
from __future__ import annotations

from typing import Any

import torch

from fitness.clean.compiled import ReplayError


def bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The tensor's whole storage as bytes (a write anywhere in the buffer shows)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def specialization(a: Any) -> tuple:
    """What Triton specializes a launch argument on: a pointer's 16-byte alignment, an integer equal
    to 1 or divisible by 16 (a build compiled for one such key serves every launch of it)."""
    if type(a) is torch.Tensor:
        return ("T", a.data_ptr() % 16 == 0)
    if type(a) is int:
        return ("i", a == 1, a % 16 == 0)
    if isinstance(a, list):
        return tuple(specialization(v) for v in a)
    return (type(a).__name__,)


def triton_dtype_names(values_only: bool = False) -> list[str]:
    """Triton's own dtype names (`values_only`: those a tensor's elements can have)."""
    import triton.language as tl

    names = tl.dtype.SINT_TYPES + tl.dtype.UINT_TYPES + tl.dtype.FP_TYPES
    return list(names) if values_only else list(names) + list(tl.dtype.OTHER_TYPES)


def triton_dtype(name: object) -> Any:
    """A Triton dtype the trace names (only Triton's own names)."""
    import triton.language as tl

    if name not in triton_dtype_names():
        raise ReplayError(f"a Triton dtype of unknown name {str(name)[:40]!r} in the trace")
    return tl.dtype(str(name))


def reinterpret(t: torch.Tensor, name: object) -> Any:
    """The interpreter's view of a recorded triton.reinterpret: the tensor as Triton dtype `name`."""
    import triton
    import triton.language as tl

    if name not in triton_dtype_names(values_only=True):
        raise ReplayError(f"a reinterpreted tensor of unknown Triton dtype {name!r} in trace")
    return triton.reinterpret(t, tl.dtype(name))
