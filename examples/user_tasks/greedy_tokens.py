"""Greedy decoding as a serving stack writes it: the next token of each sequence is the argmax of
its logits over the vocabulary. The output is an index (int64): it is compared exactly, so a
kernel whose index is one off fails however close the number is, and so does one that breaks ties
differently from torch (the lowest index wins). The logits lie on a grid of 1/4, so ties at the top
of a row are common."""
import torch

ENTRY = "greedy_tokens"


def reference(logits):
    return torch.argmax(logits, dim=-1)


def make_inputs(shape, dtype, gen):
    x = torch.randn(shape["B"], shape["V"], generator=gen, dtype=torch.float32)
    return ((torch.round(x * 4) / 4).to(dtype),)  # about a third of the rows tie at their top


SHAPES = {"tuning": [{"B": 64, "V": 32000}, {"B": 512, "V": 128256}],
          "heldout": [{"B": 1, "V": 50257}, {"B": 333, "V": 151936}]}
CPU_SHAPES = {"tuning": [{"B": 8, "V": 256}], "heldout": [{"B": 3, "V": 1000}, {"B": 17, "V": 77}]}
DTYPES = ["float32"]


def cost(shape, dtype):
    return shape["B"] * shape["V"] * 4 + shape["B"] * 8, shape["B"] * shape["V"]


START = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _argmax_rows(x_ptr, out_ptr, V, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best_v = tl.full((BLOCK,), -float("inf"), tl.float32)
    best_i = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < V, other=-float("inf")).to(tl.float32)
        take = x > best_v  # strictly greater: a lane keeps the first of equal values
        best_v = tl.where(take, x, best_v)
        best_i = tl.where(take, cols, best_i)
    top = tl.max(best_v, axis=0)
    idx = tl.min(tl.where(best_v == top, best_i, V), axis=0)  # the lowest index holding the top
    tl.store(out_ptr + row, idx.to(tl.int64))


def greedy_tokens(logits):
    logits = logits.contiguous()
    b, v = logits.shape
    out = torch.empty(b, dtype=torch.int64, device=logits.device)
    _argmax_rows[(b,)](logits, out, v, logits.stride(0), BLOCK=1024)
    return out
'''
