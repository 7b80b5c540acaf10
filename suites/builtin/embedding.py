"""Embedding lookup: gather rows of a (V, D) table by int64 ids."""
import torch

from suites.builtin.common import randn, start_source
from suites.task import ShapeSet, Task


def reference(ids, weight):
    return torch.nn.functional.embedding(ids, weight)


def make_inputs(shape, dtype, gen):
    t, v, d = shape["T"], shape["V"], shape["D"]
    ids = torch.randint(0, v, (t,), generator=gen, dtype=torch.int64)
    return ids, randn(gen, v, d).to(dtype)


def cost(shape, dtype):
    t, d = shape["T"], shape["D"]
    # ids read, one table row read and one output row written per token
    return t * 8 + 2 * t * d * 4, 0


TASK = Task(
    name="embedding",
    suite="builtin",
    category="memory",
    entry="embedding",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=(
            {"T": 8192, "V": 16000, "D": 1024},
            {"T": 32768, "V": 50000, "D": 256},
            {"T": 4096, "V": 8192, "D": 2048},
        ),
        heldout=(
            {"T": 5000, "V": 10007, "D": 769},
            {"T": 30001, "V": 1000, "D": 100},
            {"T": 4096, "V": 6007, "D": 1536},
        ),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"T": 64, "V": 500, "D": 128}, {"T": 256, "V": 1000, "D": 64}),
        heldout=({"T": 77, "V": 333, "D": 100}, {"T": 30, "V": 64, "D": 257}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (0.0, 0.0)},  # a gather must be exact
    variants=("scaled", "offset", "extreme"),
    cost=cost,
    start_source=start_source("embedding"),
    instruction=(
        "embedding(ids, weight) -> y: ids int64 (T,) with values in [0, V), weight float32 "
        "(V, D); y[t] = weight[ids[t]], float32 (T, D)."
    ),
    difficulty=1,
)
