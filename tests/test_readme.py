"""README.md as a newcomer reads it: the figures it gives agree with the code, and its set-up
commands run on any machine, not only the one it was written on."""
import re

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def test_the_readme_gives_the_builtin_suite_its_real_size(builtin):
    said = re.findall(r"`builtin` suite \((\d+) tasks\)", README) + re.findall(r"^\| `builtin` \| (\d+)", README,
                                                                            re.MULTILINE)
    assert len(said) >= 2 and {int(n) for n in said} == {len(builtin)}, said


def test_the_set_up_installs_a_cpu_torch_from_where_anyone_can_get_it():
    """A bare pin (`pip install torch==X`) pulls a CUDA build from PyPI, or names a wheel only the
    writer's machine had: every torch install the set-up gives names PyTorch's CPU index."""
    installs = re.findall(r"`(pip install torch[^`]*)`", _section("Set up").replace("\n", " "))
    assert installs
    assert [i for i in installs if "--index-url https://download.pytorch.org/whl/cpu" not in i] == []
