"""The replay's model of a call (issue 48): the complete candidates of tests/call_model/, one per
class, recorded and replayed by the engine's replayer under the Triton interpreter, on inputs the
recording never saw. Honest calls replay to the right answer; cheats fail with the reason named;
what the replay cannot model says "not replayable", never "wrong". The checks themselves are in
tests/call_model/checks.py, run once in a process of their own (the interpreter must be on before
Triton is first imported, and a pytest worker imported it compiled)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = sorted(line.split("(")[0].removeprefix("def ") for line in
                (ROOT / "tests" / "call_model" / "checks.py").read_text().splitlines() if line.startswith("def check_"))


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "tests.call_model.checks"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_class_of_the_issue_has_its_check():
    assert len(CHECKS) == 14
    for words in ("destination", "module_level_buffer", "aten_ops_outside_the_old_table", "in_place_forms",
                  "index_read_with_item", "scratch_memory", "input_the_replayed_call_writes", "input_sniffing",
                  "call_counting", "not_replayable"):
        assert any(words in c for c in CHECKS), words


@pytest.mark.parametrize("check", CHECKS)
def test_call_model(check, outcomes):
    assert outcomes.get(check) == "ok", outcomes.get(check, "not run")
