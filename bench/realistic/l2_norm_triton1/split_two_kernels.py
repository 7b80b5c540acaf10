"""Strategy: the benchmark's inputs are single rows (1-D, up to 16K): one CTA does all the work.
Split it: kernel 1 has SPLIT CTAs each summing the squares of a slice into a partial buffer,
kernel 2 (SPLIT x rows CTAs) reads the row's partials, forms rsqrt and scales its slice. Two
launches, each autotuned (8 and 8 configs)."""
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024, 2048)
                          for w in (2, 4)], key=["N", "SPLIT"])
@triton.jit
def _sumsq_kernel(X, P, stride_x_row, N, SLICE, SPLIT, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    sl = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for off in range(0, SLICE, BLOCK):
        c = sl * SLICE + off + cols
        x = tl.load(X + row * stride_x_row + c, mask=(c < N) & (off + cols < SLICE), other=0.0).to(tl.float32)
        acc += x * x
    tl.store(P + row * SPLIT + sl, tl.sum(acc, axis=0))


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024, 2048)
                          for w in (2, 4)], key=["N", "SPLIT"])
@triton.jit
def _scale_kernel(X, Y, P, stride_x_row, stride_y_row, N, SLICE, SPLIT, eps,
                  BLOCK: tl.constexpr, BLOCK_S: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    sl = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    total = tl.sum(tl.load(P + row * SPLIT + s, mask=s < SPLIT, other=0.0), axis=0)
    rstd = 1 / tl.sqrt(total + eps)
    cols = tl.arange(0, BLOCK)
    for off in range(0, SLICE, BLOCK):
        c = sl * SLICE + off + cols
        m = (c < N) & (off + cols < SLICE)
        x = tl.load(X + row * stride_x_row + c, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y_row + c, (x * rstd).to(Y.dtype.element_ty), mask=m)


def _l2_norm_fwd(x, eps=1e-6):
    x_shape_og = x.shape
    x = x.reshape(-1, x.shape[-1])
    if x.stride(-1) != 1:
        x = x.contiguous()
    y = torch.empty_like(x)
    M, N = x.shape
    if triton.next_power_of_2(N) > 65536 // x.element_size():
        raise RuntimeError("This layer norm doesn't support feature dim >= 64KB.")
    split = max(1, min(32, triton.cdiv(N, 1024), triton.cdiv(1024, M)))
    slice_len = triton.cdiv(N, split)
    partial = torch.empty((M, split), device=x.device, dtype=torch.float32)
    _sumsq_kernel[(M, split)](x, partial, x.stride(0), N, slice_len, split)
    _scale_kernel[(M, split)](x, y, partial, x.stride(0), y.stride(0), N, slice_len, split, eps,
                              BLOCK_S=triton.next_power_of_2(split))
    return y.reshape(x_shape_og)
