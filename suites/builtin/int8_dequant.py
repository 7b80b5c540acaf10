"""Per-row int8 dequantization: x = q * scale[:, None] in float32."""
import torch

from suites.builtin.common import start_source
from suites.task import ShapeSet, Task


def reference(q, scale):
    return q.to(scale.dtype) * scale[:, None]


def make_inputs(shape, dtype, gen):
    m, n = shape["M"], shape["N"]
    q = torch.randint(-127, 128, (m, n), generator=gen, dtype=torch.int8)
    # positive scales spread over two orders of magnitude
    scale = torch.exp(torch.rand(m, generator=gen) * 4.6) * 1e-3
    return q, scale.to(dtype)


def cost(shape, dtype):
    m, n = shape["M"], shape["N"]
    # int8 read, float32 scale per row read, float32 written
    return m * n + m * 4 + m * n * 4, m * n


TASK = Task(
    name="int8_dequant",
    suite="builtin",
    category="quantization",
    entry="int8_dequant",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 2048}, {"M": 16384, "N": 512}, {"M": 512, "N": 16384}),
        heldout=({"M": 3001, "N": 1999}, {"M": 10000, "N": 768}, {"M": 100, "N": 100003}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 16, "N": 1024}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 1500}),
    ),
    dtypes=("float32",),
    # one float32 multiply: the result is the correctly rounded product (<= 2**-24 relative)
    tolerance={"float32": (1e-6, 1e-6)},
    variants=("scaled",),
    cost=cost,
    start_source=start_source("int8_dequant"),
    instruction=(
        "int8_dequant(q, scale) -> x: q int8 (M, N), scale float32 (M,); "
        "x = q.float() * scale[:, None], float32 (M, N)."
    ),
    difficulty=1,
)
