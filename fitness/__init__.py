import suites  # noqa: F401 - installs the serialized ast.parse (suites/ast_lock.py)
