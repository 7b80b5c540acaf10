# entry: gelu
"""Fused GELU (tanh approximation)."""
import math

import torch
import triton
import triton.language as tl

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@triton.jit
def _tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, C: tl.constexpr, BLOCK: tl.constexpr):
    """GELU(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    y = 0.5 * x * (1.0 + _tanh(C * (x + 0.044715 * x * x * x)))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=m)


def gelu(input: torch.Tensor, approximate: str = "tanh") -> torch.Tensor:
    y = torch.empty_like(input)
    n = input.numel()
    BLOCK = 2048
    gelu_kernel[(triton.cdiv(n, BLOCK),)](input, y, n, C=SQRT_2_OVER_PI, BLOCK=BLOCK)
    return y


gelu.__doc__ = gelu_kernel.__doc__ + "\n\nWrapper: allocates the output and launches one program per block."
