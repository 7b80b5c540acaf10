"""Starting kernel for builtin/rotary: one program per (batch, position, head) vector of D
elements, so each program moves only a few hundred bytes."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, S, H, half,
                   sxb, sxs, sxh, sxd, scs, scd, sss, ssd, syb, sys, syh,
                   BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    h = pid % H
    s = (pid // H) % S
    b = pid // (H * S)
    cols = tl.arange(0, BLOCK)
    mask = cols < half
    x_base = x_ptr + b * sxb + s * sxs + h * sxh
    x1 = tl.load(x_base + cols * sxd, mask=mask, other=0.0)
    x2 = tl.load(x_base + (cols + half) * sxd, mask=mask, other=0.0)
    c = tl.load(cos_ptr + s * scs + cols * scd, mask=mask, other=0.0)
    sn = tl.load(sin_ptr + s * sss + cols * ssd, mask=mask, other=0.0)
    y_base = y_ptr + b * syb + s * sys + h * syh
    tl.store(y_base + cols, x1 * c - x2 * sn, mask=mask)
    tl.store(y_base + half + cols, x2 * c + x1 * sn, mask=mask)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    B, S, H, D = x.shape
    y = torch.empty((B, S, H, D), device=x.device, dtype=x.dtype)
    half = D // 2
    _rotary_kernel[(B * S * H,)](
        x, cos, sin, y, S, H, half, *x.stride(), *cos.stride(), *sin.stride(),
        y.stride(0), y.stride(1), y.stride(2), BLOCK=triton.next_power_of_2(half),
    )
    return y
