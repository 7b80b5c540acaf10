"""fitness/candidate/recorder.py and fitness/clean/replayer.py: what the recorder keeps of a call,
and what a replay refuses to load."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fitness.clean.compiled import _check_signature
from fitness.clean.replayer import ReplayError

ROOT = Path(__file__).resolve().parent.parent

EXPLOITS = os.path.join(os.path.dirname(__file__), "exploits")
GOOD = {"signature": {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr", "t": "[*fp16,i32]"},
        "arg_names": ["x_ptr", "n", "BLOCK", "t"], "constants": {'"BLOCK"': 1024, "[2]": None, '"DT"': "fp32"}}


def test_a_recorded_signature_of_types_names_and_plain_constants_loads():
    _check_signature(GOOD)


@pytest.mark.parametrize("bad", [
    {**GOOD, "signature": {"x": '*fp32); system("x"'}},
    {**GOOD, "arg_names": ["a;b"]},
    {**GOOD, "constants": {"k": "x\n}"}},
    {**GOOD, "signature": ["*fp32"]},
])
def test_a_signature_that_could_become_launcher_code_is_refused(bad):
    with pytest.raises(ReplayError):
        _check_signature(bad)


@pytest.mark.slow
def test_the_recorders_own_snapshot_is_not_part_of_the_recorded_call():
    """An answer made where the recorder does not look (torch on another thread) enters the
    trace as a snapshot; the copy the recorder takes of it must not be recorded as the call's own
    ops (it made interpreted traces unreplayable), and the replay on other inputs is stale.
    Through bench/trace_dump.py, under the interpreter (a process of its own: Triton reads
    TRITON_INTERPRET once)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "trace_dump.py"),
                          os.path.join(EXPLOITS, "package_importer_thread.py")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert [ln.split()[0] for ln in lines if ln.split()[0] in ("op", "launch")] == ["launch"], out.stdout
    assert "buffers: [('input', 16777216), ('snapshot', 16777216)]" in out.stdout
    assert lines[2].endswith("problem: ")
    # the answer is the snapshot itself (a module-level buffer, as far as the trace says): the
    # replay restores its recorded contents, which are stale on the fresh inputs
    verdict = next(ln for ln in lines if ln.startswith("replay vs reference:"))
    assert verdict != "replay vs reference: ok" and "outside tolerance" in verdict, out.stdout


def _reinterpreting_softmax() -> str:
    """builtin softmax's starting kernel writing its output through triton.reinterpret (TritonBench
    f8_conversion_utils reads int8 memory as float8 that way)."""
    start = (ROOT / "suites" / "builtin" / "start" / "softmax.py").read_text()
    launch = "    _softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=128)\n"
    assert launch in start
    through = ("    as_tl = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}\n"
               "    out = triton.reinterpret(y, as_tl[y.dtype])\n"
               "    _softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), y.stride(0), BLOCK=128)\n")
    return start.replace(launch, through)


@pytest.mark.slow
@pytest.mark.parametrize("interpret", ["1", pytest.param("0", marks=pytest.mark.gpu)], ids=["interpreted", "compiled"])
def test_a_tensor_passed_through_triton_reinterpret_is_recorded_and_replayed(tmp_path, interpret):
    """Interpreted, the replay reinterprets again; compiled, the binary gets the tensor's pointer."""
    path = tmp_path / "softmax_reinterpret.py"
    path.write_text(_reinterpreting_softmax())
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "trace_dump.py"), str(path)]
                         + (["--small"] if interpret == "1" else []),
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": interpret})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "problem: \n" in out.stdout and "replay vs reference: ok" in out.stdout, out.stdout


def test_a_reinterpreted_tensor_of_a_dtype_triton_does_not_have_is_refused():
    from fitness.clean.trace_values import reinterpret as _reinterpret

    with pytest.raises(ReplayError, match="unknown Triton dtype 'fp99'"):
        _reinterpret(torch.zeros(4), "fp99")


@pytest.mark.slow
def test_a_kernel_launched_on_a_reinterpreted_output_passes_the_evaluator(evaluator, builtin):
    v = evaluator.evaluate(builtin["softmax"], _reinterpreting_softmax())
    assert v.passed, v.reason
