"""What an exception raised by a call says about the device and the compiler, read alike in every
child (a CUDA fault poisons the process's context: the child cannot serve another request)."""
from __future__ import annotations


def is_compile_error(e: BaseException) -> bool:
    """Triton failed to compile the kernel (the candidate's error, not the child's)."""
    return type(e).__module__.startswith("triton.compiler") or "CompilationError" in type(e).__name__


def is_cuda_fault(e: BaseException) -> bool:
    """The device faulted: the process's CUDA context is unusable after it."""
    text = str(e)
    return any(s in text for s in ("illegal memory access", "CUDA error", "misaligned address",
                                   "unspecified launch failure", "device-side assert", "CUDA out of memory"))
