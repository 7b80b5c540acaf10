"""Where a forked child's first Triton launch goes (GPU), its kernel already in the cache:
cProfile's top entries by cumulative time. Forked from a parent that imported torch and
triton without touching CUDA, as fitness.process.zygote does. Not a test; quote its output.

    python bench/triton_first_launch.py [--top 30]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats

import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)


def _launch() -> None:
    x = torch.zeros(100, device="cuda")
    _add_one[(1,)](x, 100, BLOCK=128)
    torch.cuda.synchronize()


def _child(top: int, profile: bool) -> None:
    torch.zeros(1, device="cuda").item()  # the context, apart
    if not profile:
        _launch()
        os._exit(0)
    prof = cProfile.Profile()
    prof.enable()
    _launch()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    print(out.getvalue(), flush=True)
    os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    for profile in (False, True):  # the first child fills the cache
        pid = os.fork()
        if pid == 0:
            _child(args.top, profile)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
