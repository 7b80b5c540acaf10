# entry: l2_normalize
"""Row-wise L2 normalization with an enum for the launch strategy."""
import enum

import torch
import triton
import triton.language as tl


class Strategy(enum.Enum):
    ONE_PASS = 1
    LOOPED = 2


@triton.jit
def _l2norm(x_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0).to(tl.float32)
    norm = tl.sqrt(tl.sum(x * x, 0))
    tl.store(y_ptr + row * stride + cols, x / tl.maximum(norm, eps), mask=cols < n)


def _pick(n: int) -> Strategy:
    return Strategy.ONE_PASS if n <= 8192 else Strategy.LOOPED


def l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    rows, n = x.shape
    if _pick(n) is Strategy.LOOPED:
        raise NotImplementedError("rows over 8192 elements")
    y = torch.empty_like(x)
    _l2norm[(rows,)](x, y, n, x.stride(0), eps, BLOCK=triton.next_power_of_2(n))
    return y
