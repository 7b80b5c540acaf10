# entry: leaky_relu
"""LeakyReLU with keyword-only options, as torch.nn.functional spells them."""
import torch
import triton
import triton.language as tl


@triton.jit
def _leaky(x_ptr, y_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x >= 0, x, x * slope), mask=m)


def leaky_relu(input: torch.Tensor, *, negative_slope: float = 0.01, **kwargs) -> torch.Tensor:
    y = torch.empty_like(input)
    n = input.numel()
    _leaky[(triton.cdiv(n, 512),)](input, y, n, negative_slope, BLOCK=512)
    return y


print_name = leaky_relu.__name__
