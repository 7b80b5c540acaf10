"""What a kernel-writing answer holds: the prose before the code (a strategy or reflection) and the
complete module, taken as the first fenced Python block that defines the entry point. Strict on
purpose: an answer that cannot be used is reported back to the model once, never half-applied."""
from __future__ import annotations

import re
from dataclasses import dataclass

from fitness.engine.static_gate import defines
from suites.ast_lock import parse

MAX_RESPONSE_CHARS = 200_000  # a kernel module is a few KB; anything this long is a runaway answer
FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
NOTE_CHARS = 600


@dataclass
class Parsed:
    code: str | None
    note: str  # the prose before the code, trimmed
    error: str  # why no code could be taken; '' when code is set


def parse_answer(text: str, entry: str) -> Parsed:
    if len(text) > MAX_RESPONSE_CHARS:
        return Parsed(None, "", f"the answer is {len(text)} characters, over the {MAX_RESPONSE_CHARS} limit")
    blocks = [(m.start(), m.group(2).lower(), m.group(3)) for m in FENCE.finditer(text)]
    blocks = [b for b in blocks if b[1] in ("", "python", "py", "python3")]
    if not blocks:
        return Parsed(None, _note(text), "the answer has no fenced ```python code block")
    names = [e.strip() for e in entry.split(",") if e.strip()]  # one name, or several (ROCm's "a,b")
    wanted = " and ".join(f"`{n}`" for n in names)
    first_error = ""
    for _, _, code in blocks:
        try:
            tree = parse(code)
        except SyntaxError as e:
            first_error = first_error or f"the ```python block does not parse: {e.msg} (line {e.lineno})"
            continue
        if all(defines(tree, name) for name in names):  # as the gate checks: function, class or assignment
            return Parsed(code.rstrip() + "\n", _note(text[:blocks[0][0]]), "")  # the prose, not earlier code
        first_error = first_error or f"no ```python block defines the entry point {wanted} at module level"
    return Parsed(None, _note(text), first_error)


def _note(prose: str) -> str:
    prose = " ".join(prose.split())
    for tag in ("strategy:", "reflection:"):  # the templates ask for these labels
        i = prose.lower().find(tag)
        if i >= 0:
            prose = prose[i + len(tag):].strip()
            break
    return prose[:NOTE_CHARS]
