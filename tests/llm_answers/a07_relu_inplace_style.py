# entry: relu
"""ReLU. The wrapper mirrors torch.nn.functional.relu's signature."""
import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(input_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    input = tl.load(input_ptr + offsets, mask=mask)
    output = tl.maximum(input, 0.0)
    tl.store(output_ptr + offsets, output, mask=mask)


def relu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    output = torch.empty_like(input)
    n_elements = input.numel()
    grid = (triton.cdiv(n_elements, 1024),)
    relu_kernel[grid](input, output, n_elements, BLOCK_SIZE=1024)
    return output
