"""Issue 48: honest calls the replay's narrow model refused, judged by the real evaluator (on CPU
under the interpreter; on a GPU, replayed and timed): each passes, and on a GPU is timed."""
import re
from pathlib import Path

import pytest

HONEST = Path(__file__).parent / "honest"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in HONEST.glob("*.py")))
def test_an_honest_call_the_old_replay_refused_passes(name, evaluator, builtin):
    source = (HONEST / f"{name}.py").read_text()
    task = re.search(r'^TASK = "(\w+)"', source, re.M)  # the builtin task it is written for (softmax unless named)
    verdict = evaluator.evaluate(builtin[task.group(1) if task else "softmax"], source)
    assert verdict.passed, verdict.reason
    assert "not-replayable" not in verdict.flags
    if evaluator.gpu:
        assert verdict.speedup is not None, verdict.timing
