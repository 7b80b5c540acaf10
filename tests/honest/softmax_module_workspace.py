"""Honest (issue 48), task builtin/softmax: the output lives in a workspace kept at module level,
one per shape, made on a shape's first call and handed back (as serving code keeps buffers
between calls). From the second call on, the output is memory that appeared from outside the
recorded call: the replay restores its recorded contents, the kernel overwrites them."""
import torch
import triton
import triton.language as tl

_WORKSPACE: dict = {}


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    # pass 1: row max
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    # pass 2: sum of exponentials
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))
        s += tl.exp(x - row_max)
    denom = tl.sum(s, axis=0)
    # pass 3: normalize
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf"))
        tl.store(y_row + cols, tl.exp(x - row_max) / denom, mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    key = (n_rows, n_cols, x.dtype, x.device)
    if key not in _WORKSPACE:
        _WORKSPACE[key] = torch.empty_like(x)
    y = _WORKSPACE[key]
    _softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=128)
    return y
