"""fitness/process/child_failures.py: how a case that raises becomes a child's reply (stage, fatal,
trimmed traceback), and how the cases are timed."""
import traceback

import pytest
from triton.compiler.errors import CompilationError

from fitness.candidate.harness import CandidateError
from fitness.process.child_failures import TRACE_CHARS, run_cases, trim_trace


class Clock:
    """A real `tick`: records each phase it is asked to time, returns now."""

    def __init__(self):
        self.phases: list[str] = []

    def __call__(self, phase: str, t0: float) -> float:
        import time

        assert t0 <= time.perf_counter()
        self.phases.append(phase)
        return time.perf_counter()


def runner(fail_at: int | None = None, exc: BaseException | None = None):
    ran = []

    def run(case: dict) -> dict:
        ran.append(case["i"])
        if case["i"] == fail_at:
            raise exc
        return {"out": case["i"] * 10}
    return run, ran


CASES = [{"i": i} for i in range(4)]


def test_cases_that_all_pass_come_back_in_order_as_a_call_stage_reply():
    run, ran = runner()
    clock = Clock()
    assert run_cases(CASES, run, clock) == {"stage": "call", "results": [{"out": 0}, {"out": 10}, {"out": 20},
                                                                         {"out": 30}]}
    assert ran == [0, 1, 2, 3]
    assert clock.phases == ["first_case", "other_cases", "other_cases", "other_cases"]


def test_no_cases_is_an_empty_call_reply_and_nothing_timed():
    clock = Clock()
    assert run_cases([], lambda case: {}, clock) == {"stage": "call", "results": []}
    assert clock.phases == []


def test_a_failed_check_stops_the_cases_and_is_a_compile_stage_reply_with_its_message_alone():
    run, ran = runner(2, CandidateError("output 0: wrong values"))
    clock = Clock()
    reply = run_cases(CASES, run, clock)
    assert reply == {"stage": "compile", "error": "output 0: wrong values", "results": [{"out": 0}, {"out": 10}],
                     "case": {"i": 2}}
    assert ran == [0, 1, 2]  # the case after it never ran
    assert clock.phases == ["first_case", "other_cases", "other_cases"]  # the failing case is timed too


def test_a_compile_error_in_the_first_case_is_a_parse_failure_and_in_a_later_one_a_compile_failure():
    err = CompilationError(None, None, "unsupported tensor index")
    first = run_cases(CASES, runner(0, err)[0], Clock())
    later = run_cases(CASES, runner(1, err)[0], Clock())
    assert first["stage"] == "parse" and first["results"] == [] and first["case"] == {"i": 0}
    assert later["stage"] == "compile" and later["results"] == [{"out": 0}]
    for reply in (first, later):
        assert "CompilationError" in reply["error"] and "unsupported tensor index" in reply["error"]
        assert reply["fatal"] is False


def test_any_other_exception_in_the_first_case_is_a_compile_failure_with_its_traceback():
    reply = run_cases(CASES, runner(0, ValueError("shapes do not match"))[0], Clock())
    assert reply["stage"] == "compile" and reply["fatal"] is False
    assert reply["error"].startswith("Traceback") and "ValueError: shapes do not match" in reply["error"]
    assert "in run" in reply["error"]  # the frame that raised


@pytest.mark.parametrize("text", ["CUDA error: an illegal memory access was encountered",
                                  "misaligned address", "CUDA out of memory. Tried to allocate 2.00 GiB",
                                  "device-side assert triggered", "unspecified launch failure"])
def test_a_device_fault_is_fatal_to_the_child(text):
    reply = run_cases(CASES, runner(1, RuntimeError(text))[0], Clock())
    assert reply["fatal"] is True and reply["stage"] == "compile" and text in reply["error"]


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()],
                         ids=["exit", "interrupt", "generator exit"])
def test_a_candidate_that_exits_or_interrupts_gets_an_answer_instead_of_ending_the_child(exc):
    reply = run_cases(CASES, runner(1, exc)[0], Clock())
    assert reply["stage"] == "compile" and type(exc).__name__ in reply["error"] and reply["results"] == [{"out": 0}]


def test_a_short_trace_is_kept_whole_with_its_cause():
    try:
        try:
            {}["k"]
        except KeyError as e:
            raise ValueError("bad input") from e
    except ValueError as e:
        text = trim_trace(e)
    assert text.startswith("Traceback") and "KeyError: 'k'" in text
    assert "direct cause" in text and text.rstrip().endswith("ValueError: bad input")


def test_a_long_trace_keeps_only_its_end_so_the_exception_line_survives():
    try:
        try:
            raise ValueError("a noisy cause " + "y" * 2 * TRACE_CHARS)
        except ValueError as cause:
            raise RuntimeError("the real reason") from cause
    except RuntimeError as e:
        full = "".join(traceback.format_exception(e))
        text = trim_trace(e)
    assert len(full) > TRACE_CHARS
    assert text == "...\n" + full[-TRACE_CHARS:] and len(text) == TRACE_CHARS + 4
    assert text.rstrip().endswith("RuntimeError: the real reason")


def test_a_trace_of_exactly_the_limit_is_not_trimmed():
    bare = trim_trace(ValueError("x"))  # no frames: just the exception line
    e = ValueError("x" * (1 + TRACE_CHARS - len(bare)))
    assert len(trim_trace(e)) == TRACE_CHARS and not trim_trace(e).startswith("...")
