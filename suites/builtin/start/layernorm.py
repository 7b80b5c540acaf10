"""Starting kernel for builtin/layernorm: one program per row making three passes over global
memory (mean, variance, normalize) with a small block."""
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, sxm, sxn, sw, sb, sym,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * sxm
    # pass 1: mean
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols * sxn, mask=cols < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    # pass 2: variance around the mean (two-pass for accuracy)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    # pass 3: normalize and apply the affine parameters
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols * sb, mask=mask, other=0.0)
        tl.store(y_ptr + row * sym + cols, (x - mean) * rstd * w + b, mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float):
    n_rows, n_cols = x.shape
    y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    _layernorm_kernel[(n_rows,)](
        x, weight, bias, y, n_cols, eps, x.stride(0), x.stride(1), weight.stride(0),
        bias.stride(0), y.stride(0), BLOCK=128,
    )
    return y
