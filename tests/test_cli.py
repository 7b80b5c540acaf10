"""The command line as a user runs it: JSON verdicts, tables, and one-line errors on bad input."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CHEAP, CHEAP_TOO, ROOT

START = ROOT / "suites" / "builtin" / "start"


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_check_prints_a_json_verdict():
    p = run("check", "--suite", "builtin", "--task", "softmax", str(START / "softmax.py"))
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)
    for key in ("stage", "correct", "heldout_correct", "speedup", "reason", "flags", "times"):
        assert key in v
    assert v["correct"] and v["heldout_correct"]
    if v["device"].startswith("cpu"):
        assert v["stage"] == "correct" and v["speedup"] is None and "not timed" in v["reason"]


def test_check_of_a_failing_candidate_still_exits_zero(tmp_path):
    k = tmp_path / "k.py"
    k.write_text("this is not python (\n")
    p = run("check", "--task", "softmax", str(k))
    assert p.returncode == 0
    v = json.loads(p.stdout)
    assert v["stage"] == "none" and "not valid Python" in v["reason"]
    assert v["failed_at"] == "static gate"


@pytest.mark.parametrize("source, where", [
    ("import os\n\ndef softmax(x):\n    return x\n", "static gate"),
    ((START / "softmax.py").read_text().replace("    n_rows, n_cols = x.shape", "    raise RuntimeError('boom')"),
     "call"),
])
def test_check_names_where_a_candidate_failed(tmp_path, source, where):
    k = tmp_path / "k.py"
    k.write_text(source)
    p = run("check", "--task", "softmax", str(k))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["failed_at"] == where, p.stdout[:2000]


@pytest.mark.parametrize("content, words", [
    (b"", "empty"),
    (b"\x7fELF\x00\x00binary", "binary"),
    (b"import torch\n", "entry point"),
])
def test_bad_candidate_files_get_a_failed_verdict(tmp_path, content, words):
    k = tmp_path / "k.py"
    k.write_bytes(content)
    p = run("check", "--task", "softmax", str(k))
    assert p.returncode == 0
    assert words in json.loads(p.stdout)["reason"]


@pytest.mark.parametrize("args, words", [
    (["check", "--suite", "nosuch", "--task", "softmax", "x.py"], "unknown suite"),
    (["check", "--task", "nosuch", str(START / "softmax.py")], "unknown task"),
    (["check", "--task", "softmax", "/no/such/file.py"], "cannot read kernel file"),
    (["validate", "--tasks", "softmax,nosuch"], "unknown task"),
    (["check", "--task", "softmax", "--seeds", "a,b", str(START / "softmax.py")], "--seeds"),
])
def test_bad_input_is_one_line_and_nonzero(args, words):
    p = run(*args)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and words in p.stderr and "Traceback" not in p.stderr


def test_oversized_file_is_refused(tmp_path):
    k = tmp_path / "big.py"
    k.write_bytes(b"#" * (1 << 20 + 1))
    p = run("check", "--task", "softmax", str(k))
    assert p.returncode == 2 and "over" in p.stderr


@pytest.mark.slow
def test_list_and_list_json():
    p = run("list", "--suite", "builtin")
    assert p.returncode == 0 and "softmax" in p.stdout
    tasks = json.loads(run("list", "--suite", "builtin", "--json").stdout)
    assert len(tasks) >= 14
    for t in tasks:
        assert {"name", "category", "entry", "start_source"} <= set(t)
        assert f"def {t['entry']}" in t["start_source"]


@pytest.mark.parametrize("args, words", [
    (["valdiate", "--suite", "builtin"], "unknown command 'valdiate' (did you mean 'validate'?)"),
    (["list", "--suite", "tritonbenhc"], "unknown suite 'tritonbenhc' (did you mean 'tritonbench'?)"),
    (["list", "--suite", "builtin", "--tasks", "softmx"], "softmx (did you mean 'softmax'?)"),
])
def test_a_typo_gets_a_suggestion(args, words):
    p = run(*args)
    assert p.returncode == 2 and words in p.stderr and p.stderr.count("\n") == 1, p.stderr


@pytest.mark.slow
def test_version_and_help_for_every_option():
    import argparse

    from evolve.cli_options import COMMANDS, build_parser

    p = run("--version")
    assert p.returncode == 0 and p.stdout.startswith("triton-evolve ")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    bare = [f"{name} {a.option_strings or a.dest}" for name, parser in sub.choices.items()
            for a in parser._actions if not (a.help or "").strip()]
    assert bare == []
    text = run("resume", "--help").stdout
    assert "usage: run.py resume" in text and "islands per task" in text and "--extend" in text


@pytest.mark.slow
def test_the_console_command_runs_once_installed(tmp_path):
    """`pip install -e .` makes a `triton-evolve` command of run.py's main (run.py is a top-level
    module: pyproject's py-modules must name it). A fresh venv that sees this one's packages
    through a path file; pip installs only the project into it."""
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(ours + "\n")
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                        "--no-build-isolation", "-e", str(ROOT)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([str(venv / "bin" / "triton-evolve"), "--version"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("triton-evolve "), p.stderr[-2000:]
    p = subprocess.run([str(venv / "bin" / "triton-evolve"), "resum", "x.db"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "(did you mean 'resume'?)" in p.stderr, p.stderr


def test_a_closed_pipe_ends_list_quietly():
    p = subprocess.run(f"{sys.executable} run.py list --suite builtin --json | head -c 10", shell=True, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


@pytest.mark.slow
def test_ctrl_c_stops_validate_within_seconds_and_keeps_what_finished(tmp_path):
    import signal
    import time

    record = tmp_path / "v.json"
    tasks = [CHEAP, CHEAP_TOO, "row_sum"]  # cheap under the interpreter: one is done, one in flight, one waits
    proc = subprocess.Popen([sys.executable, "run.py", "validate", "--suite", "builtin", "--workers", "1",
                             "--tasks", ",".join(tasks), "--validation", str(record)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # a shell's background job inherits SIGINT ignored, and Python then
                            # leaves it ignored: seen when the suite ran as `... &`
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stdout.readline()  # the header
    proc.stdout.readline()  # the first task's verdict: it is recorded
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "recorded in" in err, err[-2000:]
    assert err.rstrip().endswith(f"go on with `python run.py validate --suite builtin --workers 1 --tasks "
                                 f"{','.join(tasks)} --validation {record} --pending`"), err[-2000:]
    # the in-flight task is cancelled too, not waited for (3.7 s seen on 2 shared CPU cores)
    assert time.monotonic() - t0 < 12
    assert 1 <= len(json.loads(record.read_text())["tasks"]) < len(tasks)


def test_ctrl_c_before_validate_recorded_anything_says_so_and_gives_the_command_to_paste(tmp_path):
    """It named a record it never wrote and `validate --pending`, which one cannot paste."""
    import signal

    record = tmp_path / "v.json"
    proc = subprocess.Popen([sys.executable, "run.py", "validate", "--tasks", CHEAP, "--validation", str(record)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stdout.readline()  # the header: the task's evaluation has begun, and takes seconds
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and not record.exists()
    assert err.splitlines()[-1] == ("interrupted before any task finished: nothing recorded; start again with "
                                    f"`python run.py validate --tasks {CHEAP} --validation {record}`"), err


def test_the_help_gives_the_default_record_and_archive_of_a_task_file_as_they_are_named(tmp_path):
    """A task file's record and archive carry a digest of its path; `--help` says so."""
    import re

    from suites.user import suite_label, write_template
    from suites.validation import record_path

    task = write_template("my_op", str(tmp_path))
    text = "".join(run("validate", "--help").stdout.split())  # however argparse wraps it
    said = re.search(r"ataskfileorfolderNAME:(runs/NAME-<8hexdigitsofitsabsolutepath>)-validation\.json", text)
    assert said, text
    pattern = re.escape(said.group(1)).replace("NAME", "my_op").replace(
        re.escape("<8hexdigitsofitsabsolutepath>"), "[0-9a-f]{8}")
    assert re.fullmatch(pattern + r"-validation\.json", str(record_path(str(task))))
    assert re.fullmatch(pattern, f"runs/{suite_label(str(task))}")
    assert "runs/NAME-<8hexdigitsofitsabsolutepath>.db" in "".join(run("search", "--help").stdout.split())


def test_an_unknown_option_of_a_command_gets_that_commands_usage_and_suggestions():
    p = run("validate", "--sute", "builtin")
    assert p.returncode == 2 and p.stderr.startswith("usage: run.py validate [-h] [--suite SUITE]"), p.stderr
    assert p.stderr.splitlines()[-1] == \
        "run.py validate: error: unrecognized arguments: --sute builtin; --sute (did you mean '--suite'?)"
    assert "{search,resume" not in p.stderr
    p = run("validate", "--watch", "30")  # report's option: validate does not take it, nor suggest it
    assert p.returncode == 2
    assert p.stderr.splitlines()[-1] == "run.py validate: error: unrecognized arguments: --watch 30"
    p = run("--islnds", "2")  # the main command's own
    assert p.returncode == 2 and p.stderr.startswith("usage: run.py search") and "'--islands'" in p.stderr
