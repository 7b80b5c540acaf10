"""Operator sets by name (the --operators option), with their rates."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from operators.base import WeightedOperator
from operators.knobs import KnobCrossover, KnobMutation

NAMES = ("knobs", "llm", "both")
# relative rates of the LLM operators (repair is not drawn: the search hands it the failures)
LLM_RATES = {"llm_mutate": 0.6, "llm_crossover": 0.25, "llm_generate": 0.15}


class OperatorError(Exception):
    """The operator set cannot be built; the message is meant for the user."""


@dataclass
class LLMSetup:
    client: object  # operators.llm_client.LLMClient
    gpu: str  # the GPU's figures, as prompt text
    retriever: object  # operators.retrieval.Retriever
    suite: str
    max_debug: int = 5


def knob_operators() -> list[WeightedOperator]:
    return [WeightedOperator(KnobMutation(), 0.7), WeightedOperator(KnobCrossover(), 0.3)]


def llm_operators(setup: LLMSetup) -> list[WeightedOperator]:
    from operators.llm_ops import PROMPTS, LLMCrossover, LLMGenerate, LLMMutate, LLMRepair

    knowledge = (Path(PROMPTS) / "triton_notes.md").read_text()
    gen = LLMGenerate(setup.client, setup.gpu, knowledge, setup.retriever, setup.suite)
    ops = [LLMMutate(setup.client, setup.gpu), LLMCrossover(setup.client, setup.gpu), gen]
    out = [WeightedOperator(op, LLM_RATES[op.name]) for op in ops]
    return out + [WeightedOperator(LLMRepair(setup.client, setup.gpu, gen, setup.max_debug), 0.0)]


def resolve(name: str | None, model: str | None) -> str:
    """The operator set a run uses: llm when a model is configured, else knobs."""
    name = name or ("llm" if model else "knobs")
    if name not in NAMES:
        raise OperatorError(f"unknown operator set {name!r} (known: {', '.join(NAMES)})")
    if name in ("llm", "both") and not model:
        raise OperatorError(f"--operators {name} needs a model: give --model NAME (and --base-url URL for a "
                            "server other than OpenAI's)")
    return name


def build(name: str | None, llm: LLMSetup | None = None, knob_rate: float = 0.3,
          explicit: bool = True) -> tuple[list[WeightedOperator], str]:
    """(operators, a line saying what the run uses and why)."""
    if name is None or name == "knobs":
        why = "chosen with --operators knobs" if name and explicit else "the default: no LLM is configured"
        return knob_operators(), f"knobs (LLM-free launch and compile parameters; {why})"
    if name not in NAMES:
        raise OperatorError(f"unknown operator set {name!r} (known: {', '.join(NAMES)})")
    if llm is None:
        raise OperatorError(f"--operators {name} needs a model: give --model NAME")
    model = llm.client.config.model
    why = f"chosen with --operators {name}" if explicit else "the default when a model is configured"
    if name == "llm":
        return llm_operators(llm), f"llm ({model}: mutate, crossover, generate, repair; {why})"
    if not 0 < knob_rate < 1:
        raise OperatorError("--knob-rate must be between 0 and 1 (exclusive) for --operators both")
    ops = [WeightedOperator(w.operator, w.rate * (1 - knob_rate)) for w in llm_operators(llm)]
    ops += [WeightedOperator(w.operator, w.rate * knob_rate) for w in knob_operators()]
    return ops, f"both ({model} LLM operators, and knob operators for {100 * knob_rate:.0f}% of children)"
