"""Row softmax over the last dimension of a 2-D tensor."""
import torch

from suites.builtin.common import rows_cost, start_source
from suites.task import ShapeSet, Task


def reference(x):
    return torch.softmax(x, dim=-1)


def make_inputs(shape, dtype, gen):
    x = torch.randn(shape["M"], shape["N"], generator=gen, dtype=torch.float32) * 3
    return (x.to(dtype),)


TASK = Task(
    name="softmax",
    suite="builtin",
    category="reduction",
    entry="softmax",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 1024}, {"M": 2048, "N": 4096}, {"M": 512, "N": 16384}),
        heldout=({"M": 3001, "N": 1999}, {"M": 17, "N": 32768}, {"M": 65536, "N": 100}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 16, "N": 1024}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 1500}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-6, 1e-5)},
    # input variants (suites.task.VARIANTS): softmax without the max overflows on each
    variants=("scaled", "offset", "extreme"),
    cost=rows_cost(reads=1, writes=1, flops_per_elem=5),
    start_source=start_source("softmax"),
    instruction="Softmax over the last dimension of a 2-D float32 tensor x of shape (M, N).",
    difficulty=2,
)
