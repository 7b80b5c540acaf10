# entry: quantize_int8
"""Per-row symmetric int8 quantization: returns (int8 values, fp32 scales)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _quant_row(x_ptr, q_ptr, s_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), 0)
    scale = tl.maximum(amax / 127.0, 1e-8)
    q = tl.extra.cuda.libdevice.rint(x / scale) if False else tl.floor(x / scale + 0.5)
    tl.store(q_ptr + row * stride + cols, q.to(tl.int8), mask=mask)
    tl.store(s_ptr + row, scale)


def quantize_int8(input: torch.Tensor):
    rows, cols = input.shape
    q = torch.empty((rows, cols), dtype=torch.int8, device=input.device)
    scales = torch.empty(rows, dtype=torch.float32, device=input.device)
    _quant_row[(rows,)](input, q, scales, cols, input.stride(0), BLOCK=triton.next_power_of_2(cols))
    return q, scales
