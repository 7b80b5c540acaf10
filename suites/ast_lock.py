"""ast.parse serialized for the process, on CPython before 3.12: parsing is not thread-safe
there (gh-106905, "AST constructor recursion depth mismatch"), and every layer parses sources in
several threads at once (hashing, knob operators, LLM answers, the static gate; a Dask unit's
evaluations side by side). Installed on import of `suites`, which every layer imports: a Dask
worker that loads only fitness/ failed a search with that SystemError when it was installed by
`evolve` alone."""
import ast
import sys
import threading


def install() -> None:
    if sys.version_info >= (3, 12) or getattr(ast.parse, "serialized", False):
        return
    lock = threading.Lock()
    parse = ast.parse

    def serialized_parse(*args, **kwargs):
        with lock:
            return parse(*args, **kwargs)

    serialized_parse.serialized = True
    ast.parse = serialized_parse
