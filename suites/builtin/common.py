"""Helpers shared by the builtin task modules.

Shape convention: sizes are upper-case keys ("M", "N", "K", ...); layout flags are lower-case
keys ("stride", "transposed", ...) that make_inputs honors by building a strided view.
"""
from __future__ import annotations

from pathlib import Path

import torch

START_DIR = Path(__file__).parent / "start"


def start_source(name: str) -> str:
    return (START_DIR / f"{name}.py").read_text()


def itemsize(dtype: str) -> int:
    return torch.empty(0, dtype=getattr(torch, dtype)).element_size()


def rows_cost(reads: int, writes: int, flops_per_elem: float, vec_reads: int = 0):
    """Cost model for ops over an (M, N) tensor: `reads` + `writes` full passes over memory,
    plus `vec_reads` length-N parameter vectors (weight, bias) read once."""

    def cost(shape, dtype):
        n = shape["M"] * shape["N"]
        size = itemsize(dtype)
        return (reads + writes) * n * size + vec_reads * shape["N"] * size, flops_per_elem * n

    return cost


def randn(gen, *size, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """float32 normal samples from `gen`; callers cast to the task dtype."""
    return torch.randn(*size, generator=gen, dtype=torch.float32) * scale + shift
