"""Operator sets: llm is the default once a model is set; both mixes at the asked knob rate."""
import pytest

from operators.llm_client import LLMClient, LLMConfig
from operators.registry import LLMSetup, OperatorError, build, resolve
from operators.retrieval import Retriever


class NoStore:
    def llm_response(self, key):
        return None


def setup():
    client = LLMClient(LLMConfig("m", "http://127.0.0.1:9/v1", "k"), NoStore(), 1)
    return LLMSetup(client, "gpu", Retriever([]), "builtin")


def test_default_follows_the_model_and_bad_names_are_refused():
    assert resolve(None, None) == "knobs" and resolve(None, "m") == "llm" and resolve("knobs", "m") == "knobs"
    with pytest.raises(OperatorError, match="needs a model"):
        resolve("both", None)
    with pytest.raises(OperatorError, match="unknown operator set"):
        resolve("magic", "m")


def test_both_mixes_at_the_knob_rate_and_repair_is_never_drawn():
    ops, line = build("both", setup(), knob_rate=0.25)
    rates = {w.operator.name: w.rate for w in ops}
    assert sum(r for n, r in rates.items() if n.startswith("knob")) == pytest.approx(0.25)
    assert sum(r for n, r in rates.items() if n.startswith("llm")) == pytest.approx(0.75)
    assert rates["llm_repair"] == 0 and "25% of children" in line
    ops, line = build("llm", setup(), explicit=False)
    assert {w.operator.name for w in ops} == {"llm_mutate", "llm_crossover", "llm_generate", "llm_repair"}
    assert "the default when a model is configured" in line
