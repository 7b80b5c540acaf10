# entry: bias_gelu
"""Bias + exact GELU, with launch settings kept in a small dataclass."""
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class Launch:
    block: int = 1024
    num_warps: int = 4


DEFAULT = Launch()


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, n, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs % N, mask=m, other=0.0).to(tl.float32)
    z = x + b
    y = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=m)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, launch: Launch = DEFAULT) -> torch.Tensor:
    y = torch.empty_like(x)
    n = x.numel()
    bias_gelu_kernel[(triton.cdiv(n, launch.block),)](x, bias, y, n, bias.numel(), BLOCK=launch.block,
                                                       num_warps=launch.num_warps)
    return y
