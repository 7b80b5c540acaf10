"""`parse`: ast.parse, one thread at a time on CPython before 3.12. Parsing is not thread-safe
there (gh-106905, "AST constructor recursion depth mismatch"), and every layer parses sources in
several threads at once (hashing, knob operators, LLM answers, the static gate; a Dask unit's
evaluations side by side): a Dask worker that parsed in two threads failed a search with that
SystemError. Every parse of ours goes through here (and `literal_eval`, which parses a string and
builds nodes); nothing patches the `ast` module."""
from __future__ import annotations

import ast
import sys
import threading

_LOCK = threading.Lock()
_NEEDED = sys.version_info < (3, 12)


def literal_eval(node: ast.AST | str) -> object:
    """ast.literal_eval under the same lock."""
    if not _NEEDED:
        return ast.literal_eval(node)
    with _LOCK:
        return ast.literal_eval(node)


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    if not _NEEDED:
        return ast.parse(source, filename)
    with _LOCK:
        return ast.parse(source, filename)
