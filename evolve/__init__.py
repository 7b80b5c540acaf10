"""The search. ast.parse is serialized for the process by `suites` (suites/ast_lock.py), which
the search imports like every other layer."""
import suites  # noqa: F401 - installs the serialized ast.parse
