# entry: depthwise_conv1d
"""Depthwise 1D convolution (groups == channels), 'same' padding."""
import torch
import triton
import triton.language as tl


@triton.jit
def dwconv_kernel(x_ptr, w_ptr, y_ptr, L, K: tl.constexpr, BLOCK_L: tl.constexpr):
    c = tl.program_id(0)
    pid_l = tl.program_id(1)
    offs = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros([BLOCK_L], dtype=tl.float32)
    for k in tl.static_range(K):
        pos = offs + k - K // 2
        xv = tl.load(x_ptr + c * L + pos, mask=(pos >= 0) & (pos < L), other=0.0)
        acc += xv * tl.load(w_ptr + c * K + k)
    tl.store(y_ptr + c * L + offs, acc, mask=offs < L)


def depthwise_conv1d(input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """input: (C, L); weight: (C, K) with K odd."""
    C, L = input.shape
    K = weight.shape[1]
    y = torch.empty_like(input)
    BLOCK_L = 256
    dwconv_kernel[(C, triton.cdiv(L, BLOCK_L))](input, weight, y, L, K=K, BLOCK_L=BLOCK_L)
    return y
