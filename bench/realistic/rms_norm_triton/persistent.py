"""Strategy: persistent kernel, grid = SMs x waves: each CTA keeps the weight row in registers
and loops over rows with a stride, so the 2048-row shapes pay one weight load per CTA instead of
per row; 12 configs (warps x waves) autotuned on N."""
import math

import torch
import triton
import triton.language as tl


def _num_sms(t: torch.Tensor) -> int:
    return torch.cuda.get_device_properties(t.device).multi_processor_count if torch.cuda.is_available() else 4


@triton.autotune(
    configs=[triton.Config({"WAVES": c}, num_warps=w) for w in (1, 2, 4, 8) for c in (1, 2, 4)],
    key=["N"],
)
@triton.jit(do_not_specialize=["eps"])
def rms_norm_persistent_kernel(Y, X, W, M, N, eps, NUM_SMS, BLOCK_SIZE: tl.constexpr, WAVES: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0)
    for row in range(pid, M, NUM_SMS * WAVES):
        base = tl.cast(row, tl.int64) * N
        x = tl.load(X + base + cols, mask=cmask, other=0.0).to(tl.float32)
        rrms = 1 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        tl.store(Y + base + cols, (x * rrms).to(Y.dtype.element_ty) * w, mask=cmask)


class RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, weight, eps=1e-5):
        dim = x.ndim - len(normalized_shape)
        M = math.prod(x.shape[:dim])
        N = math.prod(normalized_shape)
        x = x.contiguous()
        weight = weight.contiguous()
        y = torch.empty_like(x)
        sms = _num_sms(x)
        grid = lambda meta: (max(1, min(M, sms * meta["WAVES"])),)
        rms_norm_persistent_kernel[grid](y, x, weight, M, N, eps, sms, BLOCK_SIZE=triton.next_power_of_2(N))
        return y


def rms_norm(x, normalized_shape, weight, eps=1e-5):
    return RmsNorm.apply(x, normalized_shape, weight, eps)
