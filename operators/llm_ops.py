"""The LLM operators (GEAK's inference-time techniques, DESIGN.md section 7), each with its prompt
template in operators/prompts/:
- LLMMutate (the optimizer): the parent, the island's earlier attempts sorted ascending by speedup
  so the best comes last (OPRO), per-shape times, the evaluator's notes, the GPU's figures;
- LLMCrossover: two parents with their scores and strategies;
- LLMRepair (reflexion): a failed child with its trimmed error trace and the reflections of its
  lineage; past `max_debug` failed repairs the lineage is dropped and LLMGenerate writes afresh;
- LLMGenerate: from the task's instruction, with knowledge injection and a retrieved one-shot example.
An answer that cannot be parsed gets one follow-up in the same conversation; then the attempt
counts as failed (the raw answers stay in the archive's llm_calls).
"""
from __future__ import annotations

import random
import threading
from pathlib import Path
from string import Template

from operators.base import Child, Context, Operator, Parent, Unusable
from operators.interface import entry_phrase
from operators.llm_client import LLMCallError, LLMClient
from operators.llm_parse import MAX_RESPONSE_CHARS, parse_answer
from operators.retrieval import Retriever
from operators.shape_facts import row_key, shape_line, stable_speedup

PROMPTS = Path(__file__).parent / "prompts"
HISTORY = 6  # earlier attempts shown to the optimizer
ERROR_LINES, ERROR_CHARS = 40, 3000


def template(name: str) -> Template:
    return Template((PROMPTS / f"{name}.md").read_text())


def trim_error(text: str) -> str:
    """The end of a trace is where the cause is: keep the last lines, and the first line (the summary)."""
    lines = (text or "(no error text)").strip().splitlines()
    if len(lines) > ERROR_LINES:
        lines = lines[:1] + [f"... ({len(lines) - ERROR_LINES} lines left out) ..."] + lines[-(ERROR_LINES - 1):]
    out = "\n".join(lines)
    return out if len(out) <= ERROR_CHARS else "..." + out[-ERROR_CHARS:]


def result_line(p: Parent, baselines: dict[str, float] | None = None) -> str:
    """A kernel's result as the prompt gives it; with `baselines` (the run's median baseline time
    per shape) its speedups are against those, so attempts timed at different moments compare."""
    if not p.correct:
        return f"FAILED at stage {p.stage}: {trim_error(p.error).splitlines()[-1][:200]}"
    if p.speedup is None:
        return "correct, not timed (no GPU in this run)"
    rows = p.times
    base = baselines or {}
    shapes = "; ".join(shape_line(t, base.get(row_key(t))) for t in rows)
    score = stable_speedup(rows, base) if base else None
    head = f"speedup {score:.3f}x against the run's median baseline" if score else f"speedup {p.speedup:.3f}x"
    return head + (f" (per shape: {shapes})" if shapes else "")


def history_block(history: list[Parent], baselines: dict[str, float] | None = None) -> str:
    """OPRO: the best `HISTORY` attempts, ascending by speedup (against the stable baseline where
    given), so the best sits next to the ask."""
    def score(p: Parent) -> tuple[bool, float]:
        rows = p.times
        return p.correct, (stable_speedup(rows, baselines) if baselines and rows else None) or p.speedup or 0.0

    ranked = sorted(history, key=score)[-HISTORY:]
    if not ranked:
        return "(no earlier attempts yet)"
    return "\n\n".join(f"Attempt {i} ({result_line(p, baselines)}; strategy: {p.note or p.operator or 'n/a'}):\n"
                       f"```python\n{p.source.rstrip()}\n```" for i, p in enumerate(ranked, 1))


# answers in a row without usable code, before any usable one, that stop the LLM operators: a
# model that never writes a code block (a base model, a wrong --model) cost 24 calls before
_UNUSABLE_STOP = 8
_UNUSABLE: dict[int, int] = {}  # id(client) -> the streak (-1: it has answered with code)
_UNUSABLE_LOCK = threading.Lock()


def _count_unusable(client: LLMClient, error: str) -> None:
    """Counts an answer without usable code; Exhausted (its reason for the run's lines) at the stop."""
    with _UNUSABLE_LOCK:
        n = _UNUSABLE.get(id(client), 0)
        if n < 0:
            return
        _UNUSABLE[id(client)] = n + 1
    if n + 1 >= _UNUSABLE_STOP:
        raise Unusable(f"the model's first {n + 1} answers held no usable code (the last: {error}); "
                        "check --model names a chat model that writes code, and the answers in the archive's "
                        "llm_calls table")


class LLMOperator(Operator):
    """Shared by the LLM operators: send, parse, one follow-up, a Child carrying its call ids."""

    template_name = ""

    def __init__(self, client: LLMClient, gpu: str):
        self.client, self.gpu = client, gpu

    def messages(self, parents: list[Parent], context: Context) -> list[dict]:
        raise NotImplementedError

    def _base(self, context: Context) -> dict:
        return {"task": context.task_name, "instruction": context.instruction or "(no instruction given)",
                "entry": _form(context), "gpu": self.gpu}

    def propose(self, parents: list[Parent], context: Context, rng: random.Random) -> Child | None:
        return self.ask(self.messages(parents, context), context, self.name, rng.getrandbits(31),
                        [p.id for p in parents])

    def ask(self, messages: list[dict], context: Context, name: str, seed: int,
            parent_ids: list[int] | None = None) -> Child | None:
        """Raises Exhausted / Pending from the client; a failed attempt is None (and recorded)."""
        meta = {"task": context.task_name, "operator": name, "island": context.island,
                "generation": context.generation, "parent_ids": list(parent_ids or [])}
        calls = []
        for turn in range(2):
            try:
                reply = self.client.complete(messages, context.temperature, meta, seed)
            except LLMCallError:
                return None
            calls.append(reply.call_id)
            parsed = parse_answer(reply.text, context.entry)
            if parsed.code is not None:
                _UNUSABLE[id(self.client)] = -1  # this model writes code: no streak stops it
                return Child(parsed.code, name, parsed.note, calls)
            self.client.store.note_llm_failure(reply.call_id, parsed.error)
            _count_unusable(self.client, parsed.error)
            if turn == 1 or len(reply.text) > MAX_RESPONSE_CHARS:
                return None  # a runaway answer is not echoed back to the model
            follow = template("followup").substitute(error=parsed.error, entry=_form(context))
            messages = [*messages, {"role": "assistant", "content": reply.text}, {"role": "user", "content": follow}]
        return None

    def _chat(self, user: str, context: Context) -> list[dict]:
        return [{"role": "system", "content": template("system").substitute(entry=_form(context))},
                {"role": "user", "content": user}]


def _form(context: Context) -> str:
    return context.entry_form or entry_phrase(context.entry)


class LLMMutate(LLMOperator):
    name = "llm_mutate"
    arity = 1

    def messages(self, parents, context):
        p = parents[0]
        others = [h for h in context.history if h.id != p.id]
        user = template("mutate").substitute(
            **self._base(context), history=history_block(others, context.baselines), parent_code=p.source.rstrip(),
            parent_note=p.note or p.operator or "n/a", parent_result=result_line(p, context.baselines),
            parent_flags=", ".join(p.flags) or "nothing")
        return self._chat(user, context)


class LLMCrossover(LLMOperator):
    name = "llm_crossover"
    arity = 2

    def propose(self, parents, context, rng):
        if parents[0].id == parents[1].id:
            return None  # tournament drew one kernel twice: nothing to combine
        return super().propose(parents, context, rng)

    def messages(self, parents, context):
        a, b = parents
        user = template("crossover").substitute(
            **self._base(context), a_code=a.source.rstrip(), b_code=b.source.rstrip(),
            a_result=result_line(a, context.baselines), b_result=result_line(b, context.baselines),
            a_note=a.note or a.operator or "n/a", b_note=b.note or b.operator or "n/a")
        return self._chat(user, context)


class LLMGenerate(LLMOperator):
    """A fresh kernel from the instruction alone: the parents are ignored. In the instruction
    setting the prompt shows the interface instead of the reference, and the example never
    comes from the suite being searched."""

    name = "llm_generate"
    arity = 1
    fresh = True

    def __init__(self, client: LLMClient, gpu: str, knowledge: str, retriever: Retriever, suite: str):
        super().__init__(client, gpu)
        self.knowledge, self.retriever, self.suite = knowledge, retriever, suite

    def messages(self, parents, context):
        blind = context.setting == "instruction"
        hit = self.retriever.nearest(f"{context.instruction}\n{'' if blind else context.reference}",
                                     exclude=f"{self.suite}/{context.task_name}",
                                     exclude_suite=self.suite if blind else None)
        example, kind, name = (hit[0].code, hit[0].kind, hit[0].name) if hit else ("# (no example available)",
                                                                                    "none", "none")
        ref = (f"The PyTorch reference that defines the result:\n\n```python\n{context.reference.rstrip()}\n```"
               if context.reference and not blind else "")
        if context.interface:
            ref = f"{ref}\n\n{context.interface}".strip()
        user = template("generate").substitute(**self._base(context), knowledge=self.knowledge,
                                               reference_block=ref, example_code=example.rstrip(),
                                               example_name=name, example_kind=kind)
        return self._chat(user, context)


class LLMRepair(LLMOperator):
    """Reflexion on a failed child. Not picked at random: the search hands it the failures."""

    name = "llm_repair"
    arity = 1
    repairs = True

    def __init__(self, client: LLMClient, gpu: str, generate: LLMGenerate, max_debug: int = 5):
        super().__init__(client, gpu)
        self.generate, self.max_debug = generate, max_debug

    def propose(self, parents, context, rng):
        p = parents[0]
        if p.repairs >= self.max_debug:
            # GEAK's debugging trap: this lineage has used its repairs; start afresh
            child = self.generate.propose(parents, context, rng)
            if child is not None:
                child.note = f"lineage dropped after {p.repairs} failed repairs; fresh kernel. {child.note}"
            return child
        return super().propose(parents, context, rng)

    def messages(self, parents, context):
        p = parents[0]
        refl = "\n".join(f"{i}. {r}" for i, r in enumerate(p.reflections, 1)) or "(none yet)"
        user = template("repair").substitute(**self._base(context), code=p.source.rstrip(), stage=p.stage,
                                             error=trim_error(p.error), reflections=refl, attempt=p.repairs + 1,
                                             max_debug=self.max_debug)
        return self._chat(user, context)
