# entry: silu_and_mul
"""SwiGLU activation: silu(x[..., :d]) * x[..., d:], as in LLaMA MLPs."""
import torch
import triton
import triton.language as tl
from typing import Tuple


@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, d, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + d + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * stride_o + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _grid(rows: int, d: int, block: int) -> Tuple[int, int]:
    return (rows, triton.cdiv(d, block))


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    BLOCK = 1024
    silu_and_mul_kernel[_grid(x2.shape[0], d, BLOCK)](x2, out, d, x2.stride(0), out.stride(0), BLOCK=BLOCK)
    return out.reshape(*x.shape[:-1], d)
