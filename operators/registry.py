"""Operator sets by name (the --operators option), with their rates."""
from __future__ import annotations

from operators.base import WeightedOperator
from operators.knobs import KnobCrossover, KnobMutation

NAMES = ("knobs", "llm", "both")


class OperatorError(Exception):
    """The operator set cannot be built; the message is meant for the user."""


def knob_operators() -> list[WeightedOperator]:
    return [WeightedOperator(KnobMutation(), 0.7), WeightedOperator(KnobCrossover(), 0.3)]


def build(name: str | None) -> tuple[list[WeightedOperator], str]:
    """(operators, a line saying what the run uses and why)."""
    if name is None or name == "knobs":
        why = "chosen with --operators knobs" if name else "the default: no LLM is configured"
        return knob_operators(), f"knobs (LLM-free launch and compile parameters; {why})"
    if name in ("llm", "both"):
        raise OperatorError(f"--operators {name} needs the LLM operators, which this version does not have yet; "
                            "use --operators knobs")
    raise OperatorError(f"unknown operator set {name!r} (known: {', '.join(NAMES)})")
