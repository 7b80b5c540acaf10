"""Issue 48, honest labels: what the replay cannot model is the engine's limit, `not replayable`,
with a status of its own in validate's table, summary and record, never "wrong result". Here a
user task whose starting kernel scales by a module constant computed at import (a kernel the
replay cannot build from its source alone), validated on CPU by `run.py` as a user would."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TASK = '''"""Twice x, by a scale the module computes when it is imported."""
import torch

ENTRY = "double"


def reference(x):
    return x * 2.0


def make_inputs(shape, dtype, gen):
    return (torch.randn(shape["N"], generator=gen, dtype=torch.float32).to(dtype),)


SHAPES = {"tuning": [{"N": 4096}], "heldout": [{"N": 3000}]}
CPU_SHAPES = {"tuning": [{"N": 256}], "heldout": [{"N": 200}]}
DTYPES = ["float32"]

START = """
import torch
import triton
import triton.language as tl

SCALE = float("2.0")  # computed at import: not a literal the replay can read


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * SCALE, mask=mask)


def double(x):
    y = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
"""
'''


@pytest.mark.slow
def test_validate_gives_a_kernel_the_replay_cannot_build_a_status_of_its_own(tmp_path):
    task = tmp_path / "double_at_import.py"
    task.write_text(TASK)
    record = tmp_path / "record.json"
    out = subprocess.run([sys.executable, str(ROOT / "run.py"), "validate", "--suite", str(task), "--workers", "1",
                          "--validation", str(record)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    row = next(ln for ln in out.stdout.splitlines() if ln.startswith("double_at_import "))
    assert "not replayable" in row and "wrong result" not in row, out.stdout
    assert "0 of 1 tasks valid here; 0 invalid-here; 1 not replayable (the replay's own limit" in out.stdout
    assert "not replayable: " in out.stdout and "which the replay does not build from the source alone" in out.stdout
    entry = json.loads(record.read_text())["tasks"]["double_at_import"]
    assert entry["status"] == "not-replayable", entry
    assert "reads 'SCALE', which the replay does not build from the source alone" in \
        entry.get("reason_whole", entry["reason"])
