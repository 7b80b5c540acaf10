"""Rotary position embedding, rotate-half (GPT-NeoX) convention, on a (B, S, H, D) tensor."""
import math

import torch

from suites.builtin.common import randn, start_source
from suites.task import ShapeSet, Task


def reference(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]  # (S, 1, D/2): broadcast over batch and heads
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def make_inputs(shape, dtype, gen):
    b, s, h, d = shape["B"], shape["S"], shape["H"], shape["D"]
    if shape.get("transposed"):
        # x is a (B, H, S, D) tensor viewed as (B, S, H, D): dense but not contiguous
        x = randn(gen, b, h, s, d).to(dtype).transpose(1, 2)
    else:
        x = randn(gen, b, s, h, d).to(dtype)
    # random angles rather than the usual position*frequency table, so a kernel cannot
    # recompute the table instead of reading it
    theta = torch.rand(s, d // 2, generator=gen, dtype=torch.float64) * (2 * math.pi)
    return x, torch.cos(theta).to(dtype), torch.sin(theta).to(dtype)


def cost(shape, dtype):
    n = shape["B"] * shape["S"] * shape["H"] * shape["D"]
    table = shape["S"] * shape["D"]  # cos and sin, D/2 columns each
    return (2 * n + table) * 4, 3 * n


TASK = Task(
    name="rotary",
    suite="builtin",
    category="position",
    entry="rotary",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=(
            {"B": 1, "S": 2048, "H": 32, "D": 128},
            {"B": 4, "S": 2048, "H": 16, "D": 64},
            {"B": 1, "S": 4096, "H": 16, "D": 128},
        ),
        heldout=(
            {"B": 3, "S": 1000, "H": 12, "D": 64, "transposed": True},
            {"B": 2, "S": 777, "H": 20, "D": 96},
            {"B": 1, "S": 5001, "H": 8, "D": 80},
        ),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"B": 1, "S": 32, "H": 4, "D": 64}, {"B": 2, "S": 16, "H": 2, "D": 128}),
        heldout=(
            {"B": 1, "S": 37, "H": 3, "D": 64, "transposed": True},
            {"B": 2, "S": 13, "H": 3, "D": 96},
        ),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-5, 1e-5)},
    # input variants (suites.task.VARIANTS): x: the cos/sin tables stay tables
    variants=("scaled",),
    varied=(0,),
    cost=cost,
    start_source=start_source("rotary"),
    instruction=(
        "rotary(x, cos, sin) -> y: x float32 (B, S, H, D), possibly strided; cos and sin float32 "
        "(S, D/2). With x1 = x[..., :D/2], x2 = x[..., D/2:] and cos/sin broadcast over B and H: "
        "y = cat(x1*cos - x2*sin, x2*cos + x1*sin), float32 (B, S, H, D) contiguous."
    ),
    difficulty=2,
)
