"""Residual add fused with RMS normalization: returns the normalized output and the sum."""
import torch

from suites.builtin.common import randn, rows_cost, start_source
from suites.task import ShapeSet, Task


def reference(x, residual, weight, eps):
    h = x + residual
    y = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight
    return y, h


def make_inputs(shape, dtype, gen):
    m, n = shape["M"], shape["N"]
    x = randn(gen, m, n)
    residual = randn(gen, m, n, scale=2.0, shift=0.25)
    weight = randn(gen, n, scale=0.5, shift=1.0)
    return x.to(dtype), residual.to(dtype), weight.to(dtype), 1e-6


TASK = Task(
    name="fused_residual_rmsnorm",
    suite="builtin",
    category="fused",
    entry="fused_residual_rmsnorm",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 2048, "N": 2048}, {"M": 4096, "N": 1024}, {"M": 512, "N": 8192}),
        heldout=({"M": 1501, "N": 1999}, {"M": 3000, "N": 1000}, {"M": 199, "N": 14336}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 16, "N": 1024}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 1500}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-5, 1e-5)},
    # input variants (suites.task.VARIANTS): x and the residual; the weight as drawn
    variants=("scaled", "offset", "extreme"),
    varied=(0, 1),
    cost=rows_cost(reads=2, writes=2, flops_per_elem=5, vec_reads=1),
    start_source=start_source("fused_residual_rmsnorm"),
    instruction=(
        "fused_residual_rmsnorm(x, residual, weight, eps) -> (y, h): x and residual float32 "
        "(M, N), weight float32 (N,), eps a Python float; h = x + residual and "
        "y = h * rsqrt(mean(h**2 over the row) + eps) * weight, both float32 (M, N)."
    ),
    difficulty=2,
)
