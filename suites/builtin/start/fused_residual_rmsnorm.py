"""Starting kernel for builtin/fused_residual_rmsnorm: one program per row, small blocks, and
the residual sum computed twice (once per pass) instead of being kept on chip."""
import torch
import triton
import triton.language as tl


@triton.jit
def _fused_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, eps, sxm, sxn, srm, srn, sw, sym,
                  shm, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    # pass 1: h = x + residual, stored, and its sum of squares
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0)
        r = tl.load(r_ptr + row * srm + cols * srn, mask=mask, other=0.0)
        h = x + r
        tl.store(h_ptr + row * shm + cols, h, mask=mask)
        acc += h * h
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    # pass 2: recompute h from the inputs (not re-read from h_ptr, which this program wrote)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0)
        r = tl.load(r_ptr + row * srm + cols * srn, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0)
        tl.store(y_ptr + row * sym + cols, (x + r) * rstd * w, mask=mask)


def fused_residual_rmsnorm(x, residual, weight, eps: float):
    n_rows, n_cols = x.shape
    y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    h = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    _fused_kernel[(n_rows,)](
        x, residual, weight, y, h, n_cols, eps, x.stride(0), x.stride(1), residual.stride(0),
        residual.stride(1), weight.stride(0), y.stride(0), h.stride(0), BLOCK=128,
    )
    return y, h
