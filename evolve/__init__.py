"""The search. It parses Python sources in several threads at once (hashing, knob operators,
LLM answers, the static gate), and ast.parse is not thread-safe before CPython 3.12 (gh-106905:
"AST constructor recursion depth mismatch"), so the search serializes it for the process."""
import ast
import sys
import threading

if sys.version_info < (3, 12) and not getattr(ast.parse, "serialized", False):
    _lock = threading.Lock()
    _parse = ast.parse

    def _serialized_parse(*args, **kwargs):
        with _lock:
            return _parse(*args, **kwargs)

    _serialized_parse.serialized = True
    ast.parse = _serialized_parse
