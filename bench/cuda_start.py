"""What starting CUDA costs a forked child (GPU): wall and CPU seconds of each step, alone and
with several children starting at once. Not a test; quote its output.

    python bench/cuda_start.py [--parallel 1,4,8] [--children 8] [--load none,gpu,launches,contexts,cpu]

--load runs each measurement again beside background processes: `gpu` one process keeping the
GPU busy with back-to-back kernels (as a measuring turn does), `launches` 8 processes launching
small kernels and synchronising (as correctness children do), `contexts` 24 processes holding an
idle context each, `cpu` 12 processes spinning on the CPU. Which of them slows a context's start
says what bounds an evaluator that starts one per candidate.

Forked from a parent that imported torch and triton without touching CUDA, as fitness.process.zygote
does; each child times: the first CUDA tensor (context), a matmul (cuBLAS), a Triton kernel's
first launch from the compile cache. (Loading Triton's driver in the parent instead, to spare
the children that 0.6 s, left them unable to start CUDA: "Cannot re-initialize CUDA in forked
subprocess", on torch 2.11 / Triton 3.6.)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _driver_steps() -> tuple:
    """cuInit and the primary context's retain through the driver API, apart from torch's first tensor."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    return (("cu_init", lambda: cuda.cuInit(0)),
            ("primary_context", lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)))


def _child(w) -> None:
    out = {}
    x: list = []
    for step, fn in (*_driver_steps(), ("first_tensor", lambda: x.append(torch.randn(64, 64, device="cuda"))),
                     ("cublas", lambda: (x[0] @ x[0]).sum().item()),
                     ("triton_launch", lambda: (_add_one[(1,)](torch.zeros(100, device="cuda"), 100, BLOCK=128),
                                                torch.cuda.synchronize()))):
        t, c = time.perf_counter(), _cpu()
        fn()
        out[step] = (time.perf_counter() - t, _cpu() - c)
    os.write(w, json.dumps(out).encode())
    os._exit(0)


def run(parallel: int, children: int) -> dict:
    results, t0 = [], time.perf_counter()
    for start in range(0, children, parallel):
        pipes, pids = [], []
        for _ in range(min(parallel, children - start)):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(w)
            os.close(w)
            pipes.append(r)
            pids.append(pid)
        for r in pipes:
            results.append(json.loads(os.read(r, 1 << 16)))
            os.close(r)
        for pid in pids:  # only these: the background load's processes are children too
            os.waitpid(pid, 0)
    wall = time.perf_counter() - t0
    return {"wall_per_child": wall / children,
            **{step: tuple(statistics.median(r[step][k] for r in results) for k in (0, 1)) for step in results[0]}}


_LOADS = {  # (processes, their code)
    "none": (0, ""),
    "gpu": (1, "import torch\nx = torch.zeros(1 << 20, device='cuda')\nwhile True:\n"
               "    for _ in range(200): x.add_(1)\n    torch.cuda.synchronize()"),
    "launches": (8, "import torch\nx = torch.zeros(1 << 16, device='cuda')\nwhile True:\n"
                    "    x.add_(1); torch.cuda.synchronize()"),
    "contexts": (24, "import time, torch\ntorch.zeros(1, device='cuda')\ntime.sleep(3600)"),
    "cpu": (12, "while True: pass"),
}


def _start_load(kind: str) -> list[subprocess.Popen]:
    n, code = _LOADS[kind]
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    time.sleep(8 if n else 0)  # their torch imports and contexts started before the measurement
    return procs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parallel", default="1,4,8")
    ap.add_argument("--children", type=int, default=8)
    ap.add_argument("--load", default="none", help=f"comma-separated, of {', '.join(_LOADS)}")
    args = ap.parse_args()
    pid = os.fork()
    if pid == 0:  # compile the Triton kernel once, outside the timed children
        _child(os.open(os.devnull, os.O_WRONLY))
    os.waitpid(pid, 0)
    print(f"{os.cpu_count()} CPUs; torch {torch.__version__}, triton {triton.__version__}")
    for kind in args.load.split(","):
        procs = _start_load(kind)
        try:
            for p in (int(x) for x in args.parallel.split(",")):
                r = run(p, args.children)
                steps = ", ".join(f"{k} {v[0]:.3f} s wall / {v[1]:.3f} s CPU"
                                  for k, v in r.items() if k != "wall_per_child")
                print(f"load {kind}, {p} at once: {r['wall_per_child']:.3f} s per child; median per step: {steps}",
                      flush=True)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
