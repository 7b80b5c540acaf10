"""Taking the kernel out of an LLM answer: the first fenced Python block that defines the entry
point, the prose before it as the strategy, and a precise error otherwise."""
from operators.llm_parse import MAX_RESPONSE_CHARS, parse_answer

GOOD = "def softmax(x):\n    return x\n"


def test_first_block_defining_the_entry_point_wins():
    text = ("Strategy: one pass per row.\n```python\nimport torch\n```\n"
            f"```python\n{GOOD}```\n```python\ndef softmax(x):\n    return 2\n```")
    p = parse_answer(text, "softmax")
    assert p.code == GOOD and p.note == "one pass per row." and p.error == ""


def test_unlabelled_and_tilde_fences_count_other_languages_do_not():
    assert parse_answer(f"~~~\n{GOOD}~~~", "softmax").code == GOOD
    p = parse_answer(f"```cuda\n{GOOD}```", "softmax")
    assert p.code is None and "no fenced" in p.error


def test_errors_say_what_is_wrong():
    assert "does not parse" in parse_answer("```python\ndef softmax(:\n```", "softmax").error
    assert "`softmax`" in parse_answer("```python\ndef other():\n    pass\n```", "softmax").error
    nested = "```python\nclass K:\n    def softmax(self):\n        pass\n```"
    assert "at module level" in parse_answer(nested, "softmax").error
    assert "over the" in parse_answer("```python\n" + "#" * MAX_RESPONSE_CHARS + "\n```", "softmax").error


def test_entry_points_that_are_classes_or_several_names_are_taken_as_they_are():
    cls = "import torch\nclass FifthOrderSphericalHarmonic(torch.autograd.Function):\n    pass\n"
    assert parse_answer(f"```python\n{cls}```", "FifthOrderSphericalHarmonic").code == cls
    two = "def fwd(x):\n    return x\n\ndef bwd(x):\n    return x\n"
    assert parse_answer(f"```python\n{two}```", "fwd, bwd").code == two
    p = parse_answer("```python\ndef fwd(x):\n    return x\n```", "fwd,bwd")
    assert p.code is None and "`fwd` and `bwd`" in p.error
