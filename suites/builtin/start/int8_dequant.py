"""Starting kernel for builtin/int8_dequant: one program per row with a small block, so each
program moves little data (int8 loads are only 128 bytes per step)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _dequant_kernel(q_ptr, scale_ptr, x_ptr, n_cols, sqm, sqn, ss, sxm, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    scale = tl.load(scale_ptr + row * ss)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        q = tl.load(q_ptr + row * sqm + cols * sqn, mask=mask, other=0)
        tl.store(x_ptr + row * sxm + cols, q.to(tl.float32) * scale, mask=mask)


def int8_dequant(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = q.shape
    x = torch.empty((n_rows, n_cols), device=q.device, dtype=scale.dtype)
    _dequant_kernel[(n_rows,)](q, scale, x, n_cols, q.stride(0), q.stride(1), scale.stride(0),
                               x.stride(0), BLOCK=128)
    return x
