"""suites/validation.py: the record's reasons, their classes, and which failures earn a retry."""
import pytest

from suites import validation

TRIMMED_TRACE = """the suite's reference fails here: ...
  File "/x/triton/compiler/compiler.py", line 300, in compile
    next_module = compile_ir(module, metadata)
triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error
`ptxas` stderr:
ptxas fatal   : Unresolved extern function '__ocml_exp_f32'

Repro command: ptxas -lineinfo -v --gpu-name=sm_90a /tmp/a.ptx -o /tmp/a.ptx.o
"""


def test_a_trimmed_trace_is_summed_up_by_its_exception_and_fatal_line():
    r = validation.short_reason(TRIMMED_TRACE)
    assert r.startswith("the suite's reference fails here: triton.runtime.errors.PTXASError")
    assert "Unresolved extern function '__ocml_exp_f32'" in r
    assert validation.reason_class(r) == "ptxas: unresolved extern function (AMD-only math)"


def test_one_line_reasons_stay_as_they_are():
    assert validation.short_reason("wrong result on tuning shape x") == "wrong result on tuning shape x"
    assert validation.short_reason("") == ""


def test_only_failures_another_process_can_cause_are_retried():
    assert validation.shared_gpu_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB")
    assert validation.shared_gpu_failure("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered")
    assert validation.shared_gpu_failure("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert not validation.shared_gpu_failure("timed out after 240 s (hang or infinite loop); worker killed")
    assert not validation.shared_gpu_failure(TRIMMED_TRACE)
    assert not validation.shared_gpu_failure("wrong result on tuning shape {'test': 'result_gold'}")


def test_classes_name_the_cuda_faults():
    assert validation.reason_class("x: Compile with `TORCH_USE_CUDA_DSA` to enable") == "CUDA device-side assert"
    assert validation.reason_class("x: an illegal memory access was encountered") == "CUDA illegal memory access"
    assert validation.reason_class("x: torch.OutOfMemoryError: CUDA out of memory") == "out of memory"


LONG = ("the suite's reference fails here, after its warm-up and the first of its tuning shapes "
        "(batch 4096, hidden 8192): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB")


def test_a_brief_reason_keeps_its_exception_and_fits_a_line():
    assert LONG.index("OutOfMemoryError") > 80  # cut at 80 characters, it would say nothing
    b = validation.brief(LONG, 110)
    assert len(b) <= 110 and b.startswith("the suite's") and b.endswith("Tried to allocate 8.00 GiB")
    assert "...: torch.OutOfMemoryError" in b
    assert validation.brief("wrong result", 110) == "wrong result"
    long_exception = "x: ValueError: " + "y" * 300
    assert validation.brief(long_exception, 60) == ("ValueError: " + "y" * 300)[:57] + "..."
    assert "OutOfMemoryError" in validation.reason_class("a lead-in " * 12 + ": torch.OutOfMemoryError: boom")


def test_a_task_left_out_as_invalid_here_says_why_in_full(tmp_path, capsys):
    from evolve.config import RunConfig
    from evolve.runner import searchable

    validation.merge(tmp_path / "v.json", "builtin", "NVIDIA H100", {"softmax": {"status": validation.INVALID,
                                                                             "reason": LONG}})
    kept = searchable(RunConfig(tasks="softmax,cumsum", validation=str(tmp_path / "v.json")))
    assert list(kept) == ["cumsum"]
    line = capsys.readouterr().out.strip()
    assert line.startswith("left out softmax: invalid-here on NVIDIA H100") and "torch.OutOfMemoryError" in line


GUARD_READ = ("the suite's reference reads memory outside its inputs on the benchmark inputs (perf 3): with NaN "
              "or extreme values around its inputs, the call fails: RuntimeError: an illegal memory access was "
              "encountered")


def test_a_reference_reading_outside_its_inputs_has_its_own_class_and_is_not_retried_alone():
    assert validation.reason_class(GUARD_READ) == "reference reads memory outside its inputs"
    assert not validation.shared_gpu_failure(GUARD_READ)  # its own kernel's fault, whoever shares the GPU
    wrote = "the suite's reference writes outside its inputs on the benchmark inputs (perf 0): 8 of the ..."
    assert validation.reason_class(wrote) == "reference writes outside its inputs"


def test_an_unwritable_record_is_one_line_before_any_work(tmp_path):
    """Issue 41: validate from a folder it cannot write did the work, then died with a
    PermissionError traceback."""
    import pytest

    from suites.validation import RecordError, check_writable
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the record's folder should be")
    with pytest.raises(RecordError, match="cannot write the validation record .*give --validation FILE"):
        check_writable(blocker / "x-validation.json")
    check_writable(tmp_path / "ok" / "x-validation.json")
    assert not (tmp_path / "ok" / "x-validation.tmp").exists()


def test_a_wrong_result_note_says_what_was_wrong_then_where_never_cut_inside_the_shape():
    reason = ("wrong result on tuning shape {'N': 1024} float32 (seed 1492342232): output 0 (float32): 1024 of "
              "1024 elements outside tolerance (atol 1e-05, rtol 1e-05); worst at (288,): got -4.78634, expected 4.4")
    assert validation.brief(reason, 110) == ("output 0 (float32): 1024 of 1024 elements outside tolerance "
                                             "[tuning {'N': 1024} float32]")
    assert validation.reason_class(reason, starting=True) == "starting kernel gives a wrong result"
    assert validation.stage_words("call", reason) == "wrong result"


def validated_template(tmp_path, old: str, new: str):
    """`validate` with the real evaluator (CPU, no sandbox) of the new-task template with `old`
    replaced by `new` in its starting kernel: (the table's line for the task, its record entry)."""
    from evolve.commands import ValidateOptions, validate
    from fitness.engine.evaluator import EvalConfig, Evaluator
    from suites.registry import load_suite
    from suites.user import write_template

    path = write_template("my_op", str(tmp_path))
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))
    opts = ValidateOptions(suite=str(path), record=tmp_path / "v.json", timed=False)
    validate(load_suite(str(path)), opts, lambda w: Evaluator(EvalConfig(workers=w, device="cpu", sandbox=False,
                                                                         timeout_s=120, mem_limit_gb=8)))
    return validation.read(opts.record)["tasks"]["my_op"]


@pytest.mark.slow
def test_a_crash_note_in_validates_table_is_cut_at_a_word_not_inside_the_shapes_dict(tmp_path, capsys):
    """The note and the record said "tuning case {'N': RuntimeError: boom", without the crash's
    line in the kernel, which `check`'s whole trace shows."""
    from suites.user import TEMPLATE

    raising = "    out = torch.empty_like(x)\n"
    start = TEMPLATE.read_text().split("START = '''")[1]
    line = start.splitlines().index(raising.rstrip("\n")) + 2  # the raise goes after it
    entry = validated_template(tmp_path, raising, raising + '    raise RuntimeError("boom")\n')
    said = f"tuning case {{'N': 1024}} float32: RuntimeError: boom (line {line} of the kernel, in my_op)"
    assert entry["reason"] == said
    assert capsys.readouterr().out.splitlines()[1].endswith(f"crashed        FAIL            -  {said}")


def test_a_note_too_long_for_its_column_cuts_its_lead_in_at_a_word_never_inside_the_shape():
    reason = ("tuning case {'M': 64, 'N': 256} float32: torch did work outside Triton kernels: add (4096 "
              "elements), mul (2048 elements)")
    assert validation.brief(reason, 110) == ("tuning case...: torch did work outside Triton kernels: add (4096 "
                                             "elements), mul (2048 elements)")
    assert validation.lead_in(reason) == "tuning case {'M': 64, 'N': 256} float32"


# reasons of the H100 record bench/results/issue48-validation-after.json (the A/A one as reason_whole)
AA_WHY = ("timing: the baseline's own code, timed against itself, measured 0.37x (e.g. {'perf': 7}: the baseline "
          "0.019 ms, its replayed kernels 0.134 ms, cuda-graph): the two sides are not timed alike here; in the "
          "baseline's own code, it autotunes chunk_global_reversed_cumsum_scalar_kernel with key=[] (line 19): each "
          "process keeps the config its first input picked, whatever the shape")
TIMED_WRONG = ("timing: a timed trial of the replay, checked unannounced, gave a wrong result (input set 8): "
               "output[2]: (float32): 1000 of 8192 elements outside tolerance (atol 0.249454, rtol 0.004); "
               "worst at (0, 0, 7): got -inf, expected 53.4184")
NOT_REPRODUCIBLE = ("the suite's reference is not reproducible on the benchmark inputs (perf 0): two calls on the same "
                    "inputs differ: output[0]: (int8): 1012 of 8192 integer elements differ (exact required; no "
                    "rounding rule declared); worst: got 1, expected 126")


def test_a_records_reason_is_its_whole_line_not_cut_at_300_characters():
    """The record said "... key=[] (line 19" and lost what the autotuning does to the timing."""
    assert len(AA_WHY) > 300 and validation.short_reason(AA_WHY) == AA_WHY
    printed = "ValueError: " + " ".join(["tensor([0.1234,"] * 400)  # an exception that prints a tensor
    cut = validation.short_reason(printed)
    assert len(cut) <= validation.MAX_REASON and cut.endswith("tensor([0.1234,...")


def test_the_summary_counts_the_engines_failures_apart_from_a_starting_kernels_wrong_results():
    """Both counted as `starting kernel gives a wrong result` (and, for a suite's reference, the
    timed replay's as `reference not reproducible`)."""
    wrong = "wrong result on tuning shape {'N': 1024} float32 (seed 1): output 0 (float32): 3 of 1024 elements ..."
    entries = {n: {"status": validation.INVALID, "reason": r}
               for n, r in (("a", TIMED_WRONG), ("b", NOT_REPRODUCIBLE), ("c", wrong))}
    assert validation.summary(entries, starting=True)[1:] == [
        "     1  timing: the timed replay gave a wrong result (the engine's side)",
        "     1  reference not reproducible", "     1  starting kernel gives a wrong result"]
    assert validation.reason_class(TIMED_WRONG) == "timing: the timed replay gave a wrong result (the engine's side)"
