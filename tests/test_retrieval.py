"""One-shot retrieval: TF-IDF over code tokens finds a similar kernel, never the task's own."""
from operators.retrieval import Example, Retriever, corpus_from_suites


def test_nearest_is_similar_code_and_never_the_task_itself():
    corpus = [Example("s/softmax", "tl.max tl.exp tl.sum row softmax", "k"),
              Example("s/log_softmax", "tl.max tl.exp tl.sum tl.log row", "k"),
              Example("s/matmul", "tl.dot acc BLOCK_K pid_m pid_n", "k")]
    r = Retriever(corpus)
    assert r.nearest("row max exp sum softmax", exclude="s/other")[0].name == "s/softmax"
    hit, score = r.nearest("row max exp sum softmax", exclude="s/softmax")
    assert hit.name == "s/log_softmax" and score > 0
    assert r.nearest("tl.dot BLOCK_K", exclude="s/softmax")[0].name == "s/matmul"


def test_builtin_corpus_holds_starting_kernels(builtin):
    corpus = corpus_from_suites({"builtin": builtin})
    assert len(corpus) == len(builtin) and all("@triton.jit" in e.code for e in corpus)
    hit, _ = Retriever(corpus).nearest("torch.nn.functional.layer_norm(x, weight, bias, eps)",
                                       exclude="builtin/layernorm")
    assert hit.name != "builtin/layernorm"


def test_public_suite_tasks_give_their_reference_files(tmp_path):
    from suites.registry import load_suite
    from tests.suite_fixtures import write_tritonbench

    tb = load_suite("tritonbench", str(write_tritonbench(tmp_path)))
    corpus = {e.name: e for e in corpus_from_suites({"tritonbench": tb})}
    assert "def scale_add(" in corpus["tritonbench/scale_add"].code
    best, _ = Retriever(list(corpus.values())).nearest(corpus["tritonbench/scale_add"].code, "tritonbench/scale_add")
    assert best.name != "tritonbench/scale_add"
