"""fitness/ is laid out by where its code runs; these rules keep each folder's imports on its side
of the trust boundary (README: For developers)."""
import ast
from pathlib import Path

from tests.conftest import ROOT

# folder -> the fitness folders its modules may import (besides their own)
MAY_IMPORT = {
    "common": set(),  # pure code every side runs alike: imports nothing of a side
    "clean": {"common"},  # never runs candidate-side code, never the engine's
    "candidate": {"common", "clean"},  # the recorder describes compiled kernels as the replay reads them
    "process": {"common", "clean", "candidate"},  # a child serves one kind of conversation: either side
    "engine": {"common", "clean", "process"},  # the engine never imports what runs beside a candidate
}


def _imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fitness"):
            names = [node.module] if node.module != "fitness" else [f"fitness.{a.name}" for a in node.names]
            found += [(n, node.lineno) for n in names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("fitness")]
    return found


def test_every_fitness_module_lives_in_a_folder_named_for_where_it_runs():
    assert sorted(p.name for p in (ROOT / "fitness").glob("*.py")) == ["__init__.py"]
    assert sorted(p.name for p in (ROOT / "fitness").iterdir() if p.is_dir() and p.name != "__pycache__") == \
        sorted(MAY_IMPORT)


def test_no_module_imports_across_the_trust_boundary():
    wrong = []
    for folder, allowed in MAY_IMPORT.items():
        for path in sorted((ROOT / "fitness" / folder).glob("*.py")):
            for name, line in _imports(path):
                other = name.split(".")[1] if "." in name else ""
                if other != folder and other not in allowed:
                    wrong.append(f"fitness/{folder}/{path.name}:{line} imports {name}")
    assert wrong == []
