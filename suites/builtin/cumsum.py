"""Inclusive prefix sum along the last dimension of a 2-D tensor."""
import torch

from suites.builtin.common import randn, rows_cost, start_source
from suites.task import ShapeSet, Task


def reference(x):
    return torch.cumsum(x, dim=-1)


def make_inputs(shape, dtype, gen):
    # scaled by 1/sqrt(N) so the prefix sums stay O(1) for every row length and one absolute
    # tolerance fits both short and 100k-long rows
    x = randn(gen, shape["M"], shape["N"], scale=shape["N"] ** -0.5)
    return (x.to(dtype),)


TASK = Task(
    name="cumsum",
    suite="builtin",
    category="scan",
    entry="cumsum",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 2048, "N": 4096}, {"M": 256, "N": 32768}, {"M": 16384, "N": 512}),
        heldout=({"M": 3001, "N": 1999}, {"M": 10, "N": 100003}, {"M": 50000, "N": 77}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 4, "N": 4096}),
        heldout=({"M": 37, "N": 333}, {"M": 3, "N": 5000}),
    ),
    dtypes=("float32",),
    # a float32 carry over long rows drifts by ~sqrt(N/BLOCK) half-ulps of an O(1) running
    # sum: about 1e-6 at N=100003, a tenth of the atol
    tolerance={"float32": (1e-5, 1e-5)},
    variants=("scaled", "offset"),
    cost=rows_cost(reads=1, writes=1, flops_per_elem=1),
    start_source=start_source("cumsum"),
    instruction=(
        "cumsum(x) -> y: x float32 (M, N); y[i, j] = sum_{k <= j} x[i, k] (inclusive scan along "
        "the last dimension), float32 (M, N)."
    ),
    difficulty=3,
)
