# entry: apply_rotary
"""Rotary position embedding applied to (seq, heads, dim) queries."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(q_ptr, cos_ptr, sin_ptr, out_ptr, seq_stride, head_stride, HALF: tl.constexpr):
    s = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, HALF)
    base = s * seq_stride + h * head_stride
    x1 = tl.load(q_ptr + base + d).to(tl.float32)
    x2 = tl.load(q_ptr + base + HALF + d).to(tl.float32)
    c = tl.load(cos_ptr + s * HALF + d)
    sn = tl.load(sin_ptr + s * HALF + d)
    tl.store(out_ptr + base + d, (x1 * c - x2 * sn).to(out_ptr.dtype.element_ty))
    tl.store(out_ptr + base + HALF + d, (x2 * c + x1 * sn).to(out_ptr.dtype.element_ty))


def apply_rotary(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    S, H, D = q.shape
    out = torch.empty_like(q)
    _rope_kernel[(S, H)](q, cos, sin, out, q.stride(0), q.stride(1), HALF=D // 2)
    return out
