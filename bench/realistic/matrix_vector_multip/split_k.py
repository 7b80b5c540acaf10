"""Strategy: split-K GEMV: with N as small as 128 rows there are too few row blocks to fill the
GPU, so the reduction dimension is cut into SPLIT slices: kernel 1 writes fp32 partial dot
products (row blocks x SPLIT CTAs), kernel 2 sums the slices. 16 + 8 autotuned configs."""
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_N": n, "BLOCK_M": m}, num_warps=w)
             for n, m in ((4, 256), (8, 128), (8, 256), (16, 128)) for w in (2, 4) for _s in (0, 1)
             if _s == 0 or n == 8],
    key=["N", "M", "SPLIT"],
)
@triton.jit
def _mv_partial_kernel(A, B, P, N, M, SLICE, SPLIT, stride_an, stride_am, stride_bm,
                       BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    sl = tl.program_id(1)
    cols = tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for off in range(0, SLICE, BLOCK_M):
        c = sl * SLICE + off + cols
        cm = (c < M) & (off + cols < SLICE)
        a = tl.load(A + rows.to(tl.int64)[:, None] * stride_an + c[None, :] * stride_am,
                    mask=(rows[:, None] < N) & cm[None, :], other=0.0).to(tl.float32)
        b = tl.load(B + c * stride_bm, mask=cm, other=0.0).to(tl.float32)
        acc += tl.sum(a * b[None, :], axis=1)
    tl.store(P + rows * SPLIT + sl, acc, mask=rows < N)


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128, 256, 512) for w in (1, 4)],
                 key=["N", "SPLIT"])
@triton.jit
def _mv_reduce_kernel(P, C, N, SPLIT, stride_cn, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    s = tl.arange(0, BLOCK_S)
    p = tl.load(P + rows[:, None] * SPLIT + s[None, :], mask=(rows[:, None] < N) & (s[None, :] < SPLIT), other=0.0)
    tl.store(C + rows * stride_cn, tl.sum(p, axis=1).to(C.dtype.element_ty), mask=rows < N)


def mv(inp, vec):
    assert inp.shape[1] == vec.shape[0], "incompatible dimensions"
    N, M = inp.shape
    out = torch.empty((N,), device=inp.device, dtype=inp.dtype)
    split = max(1, min(16, triton.cdiv(M, 512), triton.cdiv(2048, max(1, N // 8))))
    slice_len = triton.cdiv(M, split)
    partial = torch.empty((N, split), device=inp.device, dtype=torch.float32)
    grid = lambda META: (triton.cdiv(N, META["BLOCK_N"]), split)
    _mv_partial_kernel[grid](inp, vec, partial, N, M, slice_len, split, inp.stride(0), inp.stride(1), vec.stride(0))
    _mv_reduce_kernel[lambda META: (triton.cdiv(N, META["BLOCK"]),)](partial, out, N, split, out.stride(0),
                                                                    BLOCK_S=triton.next_power_of_2(split))
    return out
