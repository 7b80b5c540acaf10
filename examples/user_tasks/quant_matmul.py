"""Torch glue around a Triton kernel: the weight is quantized to int8 per column in torch, the
matmul with the dequantized weight is a Triton kernel. TORCH_OPS = "allowed" says the torch work
is part of the kernel: the replay runs it and times it with the Triton kernels (total time
counts); without it, torch work outside Triton kernels fails the candidate."""
import torch

ENTRY = "quant_matmul"
TORCH_OPS = "allowed"


def reference(x, w):
    # quantized as the wrapper quantizes, in float32 (the engine calls the reference in float64):
    # ties decided in float64 moved weights by a level, outputs by scale * |x| (H200, K=4096: 5607
    # of 4M elements past the tolerance)
    w32 = w.float()
    scale = w32.abs().amax(dim=0).clamp_min(1e-8) / 127.0
    wq = torch.round(w32 / scale).clamp(-127, 127)
    return x @ (wq * scale).to(x.dtype)


def make_inputs(shape, dtype, gen):
    x = torch.randn(shape["M"], shape["K"], generator=gen, dtype=torch.float32)
    w = torch.randn(shape["K"], shape["N"], generator=gen, dtype=torch.float32)
    return x.to(dtype), w.to(dtype)


SHAPES = {"tuning": [{"M": 1024, "K": 1024, "N": 1024}, {"M": 4096, "K": 4096, "N": 1024}],
          "heldout": [{"M": 2000, "K": 1024, "N": 768}, {"M": 512, "K": 2048, "N": 2048}]}
CPU_SHAPES = {"tuning": [{"M": 32, "K": 32, "N": 32}],
              "heldout": [{"M": 16, "K": 32, "N": 48}, {"M": 40, "K": 64, "N": 16}]}
DTYPES = ["float32"]
# a weight element a rounding tie away in float32 moves one output by scale * |x|: a little slack
TOLERANCE = {"float32": (1e-3, 1e-3)}

START = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _matmul_dequant(x_ptr, q_ptr, s_ptr, out_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(x_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
                    other=0.0)
        q = tl.load(q_ptr + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0)
        # ieee: a float32 dot is TF32 on Hopper by default, 1e-3 off (H200: 13% of elements past atol 1e-3)
        acc += tl.dot(a, q.to(tl.float32), input_precision="ieee")
    s = tl.load(s_ptr + rn, mask=rn < N, other=0.0)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc * s[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))


def quant_matmul(x, w):
    scale = w.abs().amax(dim=0).clamp_min(1e-8) / 127.0  # torch: the quantization
    wq = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
    x = x.contiguous()
    M, K = x.shape
    N = w.shape[1]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    _matmul_dequant[grid](x, wq, scale, out, M, N, K, BM=16, BN=16, BK=16)
    return out
'''
