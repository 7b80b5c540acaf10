"""A quantization judged by a whole-tensor metric: per-row int8 fake quantization (quantize and
dequantize). Element by element, a value a rounding tie away differs by a whole quantization
step, so quantization kernels are judged as a whole: cosine similarity and relative L1 error."""
import torch

ENTRY = "fake_quant_int8"
TOLERANCE = {"cosine": 0.99999, "rel_l1": 1e-3}  # every output, as a whole tensor


def reference(x):
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-8) / 127.0
    return torch.round(x / scale).clamp(-127, 127) * scale


def make_inputs(shape, dtype, gen):
    return (torch.randn(shape["ROWS"], shape["COLS"], generator=gen, dtype=torch.float32).to(dtype),)


SHAPES = {"tuning": [{"ROWS": 4096, "COLS": 4096}, {"ROWS": 16384, "COLS": 1024}],
          "heldout": [{"ROWS": 3000, "COLS": 2048}, {"ROWS": 999, "COLS": 4096}]}
CPU_SHAPES = {"tuning": [{"ROWS": 16, "COLS": 128}], "heldout": [{"ROWS": 9, "COLS": 64}, {"ROWS": 20, "COLS": 256}]}
DTYPES = ["float32"]

START = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _fake_quant_row(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-8) / 127.0
    q = tl.minimum(tl.maximum(tl.floor(x / scale + 0.5), -127.0), 127.0)
    tl.store(y_ptr + row * n_cols + cols, q * scale, mask=mask)


def fake_quant_int8(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    _fake_quant_row[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
    return y
'''
