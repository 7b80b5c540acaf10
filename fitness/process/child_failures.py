"""How a failure inside a child becomes its reply: the stage it failed at, whether the child
may go on (a CUDA fault poisons its context), and the traceback, trimmed for the verdict.

Anything a candidate raises is its failure, never the child's: every request is answered, and
the engine reads `fatal` to kill a child that cannot serve another (fitness.engine.pool).
"""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from fitness.candidate.harness import CandidateError
from fitness.common.faults import is_compile_error as is_compile_error  # re-exported
from fitness.common.faults import is_cuda_fault

TRACE_CHARS = 4000
# a phase's clock (fitness.process.child.Child._tick): adds the ms since t0 to a phase, returns now
Tick = Callable[[str, float], float]


def trim_trace(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= TRACE_CHARS else "...\n" + text[-TRACE_CHARS:]


def run_cases(cases: list[dict], run: Callable[[dict], dict], tick: Tick) -> dict:
    """Each case's result until one fails; the reply says which, at which stage, and why.
    `tick(phase, t0)`: the first case's time (Triton compiles on the first launch) apart."""
    results: list[dict] = []
    for i, case in enumerate(cases):
        t0 = time.perf_counter()
        try:
            results.append(run(case))
        except CandidateError as e:
            return {"stage": "compile", "error": str(e), "results": results, "case": case}
        except BaseException as e:  # noqa: BLE001 - anything the candidate raises is its failure
            stage = "parse" if is_compile_error(e) and not results else "compile"
            return {"stage": stage, "error": trim_trace(e), "results": results, "case": case,
                    "fatal": is_cuda_fault(e)}
        finally:
            tick("first_case" if i == 0 else "other_cases", t0)
    return {"stage": "call", "results": results}
