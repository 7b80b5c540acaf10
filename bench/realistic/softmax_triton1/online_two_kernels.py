"""Strategy: for wide rows (n_cols up to 32K) a single-block row spills registers; split it:
kernel 1 makes one online (max, sum-exp) pass per row in BLOCK_N chunks, kernel 2 rereads the row
and writes exp(x - m) / s. Two launches, each with 8 autotuned configs on n_cols; rows that fit
one block take a fused single-pass kernel instead (a third kernel)."""
import torch
import triton
import triton.language as tl

_CHUNK_CONFIGS = [triton.Config({"BLOCK_N": n}, num_warps=w) for n in (512, 1024, 2048, 4096) for w in (4, 8)]


@triton.autotune(configs=_CHUNK_CONFIGS, key=["n_cols"])
@triton.jit
def _row_stats_kernel(x_ptr, m_ptr, s_ptr, stride, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    for off in range(0, n_cols, BLOCK_N):
        c = off + cols
        x = tl.load(x_ptr + row * stride + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(s * tl.exp(m - m_row), axis=0)
    tl.store(m_ptr + row, m_row)
    tl.store(s_ptr + row, s_row)


@triton.autotune(configs=_CHUNK_CONFIGS, key=["n_cols"])
@triton.jit
def _normalize_kernel(x_ptr, y_ptr, m_ptr, s_ptr, x_stride, y_stride, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    c = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = c < n_cols
    m = tl.load(m_ptr + row)
    inv = 1.0 / tl.load(s_ptr + row)
    x = tl.load(x_ptr + row * x_stride + c, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + c, tl.exp(x - m) * inv, mask=mask)


@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (2, 4, 8, 16)], key=["n_cols"])
@triton.jit
def _fused_kernel(x_ptr, y_ptr, x_stride, y_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * y_stride + c, e / tl.sum(e, axis=0), mask=c < n_cols)


def softmax(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    if n_cols <= 2048:
        _fused_kernel[(n_rows,)](x, y, x.stride(0), y.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return y
    m = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    s = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    _row_stats_kernel[(n_rows,)](x, m, s, x.stride(0), n_cols)
    grid = lambda meta: (n_rows, triton.cdiv(n_cols, meta["BLOCK_N"]))
    _normalize_kernel[grid](x, y, m, s, x.stride(0), y.stride(0), n_cols)
    return y
