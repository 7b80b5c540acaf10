# entry: clamp
"""Clamp with optional bounds; None means unbounded on that side."""
from typing import Optional, Union

import torch
import triton
import triton.language as tl

Number = Union[int, float]


@triton.jit
def clamp_kernel(x_ptr, y_ptr, n, lo, hi, HAS_LO: tl.constexpr, HAS_HI: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if HAS_LO:
        x = tl.maximum(x, lo)
    if HAS_HI:
        x = tl.minimum(x, hi)
    tl.store(y_ptr + offs, x, mask=m)


def clamp(input: torch.Tensor, min: Optional[Number] = None, max: Optional[Number] = None) -> torch.Tensor:
    out = torch.empty_like(input)
    n = input.numel()
    clamp_kernel[(triton.cdiv(n, 1024),)](input, out, n, 0.0 if min is None else min, 0.0 if max is None else max,
                                          HAS_LO=min is not None, HAS_HI=max is not None, BLOCK=1024)
    return out
