"""Row argmax: the index of each row's largest element (an index output: compared exactly)."""
import torch

from suites.builtin.common import randn, start_source
from suites.task import ShapeSet, Task


def reference(x):
    return torch.argmax(x, dim=-1)  # ties: the lowest index


def make_inputs(shape, dtype, gen):
    m, n = shape["M"], shape["N"]
    # values on a grid of 1/8 plus small noise: a row's top values are often a few 1e-3 apart, so
    # a kernel that loads or compares in less than float32 picks another index
    grid = torch.round(randn(gen, m, n, scale=8.0)) / 8
    return ((grid + randn(gen, m, n, scale=1e-3)).to(dtype),)


def cost(shape, dtype):
    m, n = shape["M"], shape["N"]
    return m * n * 4 + m * 8, m * n


TASK = Task(
    name="row_argmax",
    suite="builtin",
    category="reduction",
    entry="row_argmax",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 4096}, {"M": 256, "N": 65536}, {"M": 65536, "N": 256}),
        heldout=({"M": 3001, "N": 1999}, {"M": 17, "N": 100003}, {"M": 100000, "N": 77}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 8, "N": 4096}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 2500}),
    ),
    dtypes=("float32",),
    tolerance={"int64": (0, 0)},  # an index: exact (fitness.common.compare, whatever a tolerance says)
    variants=("scaled", "offset", "extreme"),
    cost=cost,
    start_source=start_source("row_argmax"),
    instruction=(
        "row_argmax(x) -> idx: x float32 (M, N); idx int64 (M,) with idx[i] the index of the "
        "largest x[i, j]; ties go to the lowest index (as torch.argmax)."
    ),
    difficulty=1,
)
