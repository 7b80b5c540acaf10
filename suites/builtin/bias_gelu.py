"""Bias add followed by exact (erf) GELU over a 2-D tensor."""
import torch

from suites.builtin.common import randn, rows_cost, start_source
from suites.task import ShapeSet, Task


def reference(x, bias):
    return torch.nn.functional.gelu(x + bias)  # approximate="none": the erf form


def make_inputs(shape, dtype, gen):
    x = randn(gen, shape["M"], shape["N"])
    bias = randn(gen, shape["N"], scale=0.5)
    return x.to(dtype), bias.to(dtype)


TASK = Task(
    name="bias_gelu",
    suite="builtin",
    category="elementwise",
    entry="bias_gelu",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 2048}, {"M": 8192, "N": 1024}, {"M": 1024, "N": 8192}),
        heldout=({"M": 3001, "N": 1999}, {"M": 8000, "N": 768}, {"M": 500, "N": 12289}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 16, "N": 1024}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 1500}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-5, 1e-5)},
    variants=("scaled", "offset"),
    cost=rows_cost(reads=1, writes=1, flops_per_elem=8, vec_reads=1),
    start_source=start_source("bias_gelu"),
    instruction=(
        "bias_gelu(x, bias) -> y: x float32 (M, N), bias float32 (N,); "
        "y = gelu(x + bias) with the exact erf GELU, 0.5*h*(1 + erf(h/sqrt(2))), float32 (M, N)."
    ),
    difficulty=1,
)
