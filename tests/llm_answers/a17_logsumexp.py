# entry: logsumexp
"""Numerically stable logsumexp over the last dim."""
import torch
import triton
import triton.language as tl


@triton.jit
def _lse_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, x)
        s = s * tl.exp(m - new_m) + tl.exp(x - new_m)
        m = new_m
    mx = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - mx), 0)
    tl.store(out_ptr + row, mx + tl.log(total))


def logsumexp(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if input.dim() != 2:
        raise ValueError(f"expected a 2D input, got {input.dim()}D")
    out = torch.empty(input.shape[0], dtype=torch.float32, device=input.device)
    _lse_kernel[(input.shape[0],)](input, out, input.shape[1], input.stride(0), BLOCK=1024)
    return out.to(input.dtype)


if __doc__ is None:
    __doc__ = logsumexp.__doc__
