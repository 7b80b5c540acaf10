"""One-shot example retrieval for generation (GEAK): the corpus kernel whose code is most like the
task's, by TF-IDF over code tokens and cosine similarity (scikit-learn). The task itself is never
in its own corpus, so the example cannot be its answer."""
from __future__ import annotations

import inspect
from dataclasses import dataclass

# identifiers and numbers: what code similarity rests on (tl.load, BLOCK_SIZE, softmax, ...)
TOKENS = r"[A-Za-z_][A-Za-z0-9_]*|\d+"


@dataclass(frozen=True)
class Example:
    name: str  # "suite/task"
    code: str
    kind: str  # "starting kernel" or "reference"


def corpus_from_suites(suites: dict[str, dict]) -> list[Example]:
    """Builtin tasks give their Triton starting kernels; other suites give their references."""
    out = []
    for suite, tasks in suites.items():
        for t in tasks.values():
            if suite == "builtin" and t.start_source:
                out.append(Example(f"{suite}/{t.name}", t.start_source, "starting kernel"))
            else:
                src = reference_source(t)
                if src:
                    out.append(Example(f"{suite}/{t.name}", src, "reference"))
    return out


def reference_source(task) -> str:
    if getattr(task, "script", None) is not None:  # a public suite's task: its reference file
        return task.script.reference_source
    try:
        return inspect.getsource(task.reference)
    except (OSError, TypeError):
        return ""


class Retriever:
    def __init__(self, corpus: list[Example]):
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.corpus = corpus
        self.vectorizer = TfidfVectorizer(token_pattern=TOKENS, lowercase=True, sublinear_tf=True)
        self.matrix = self.vectorizer.fit_transform([e.code for e in corpus]) if corpus else None

    def nearest(self, query: str, exclude: str, exclude_suite: str | None = None) -> tuple[Example, float] | None:
        """The most similar example whose name is not `exclude` ("suite/task") and, when given,
        not of `exclude_suite` (the instruction setting: no task of the searched suite)."""
        if self.matrix is None:
            return None
        from sklearn.metrics.pairwise import cosine_similarity

        scores = cosine_similarity(self.vectorizer.transform([query]), self.matrix)[0]
        ranked = sorted(range(len(self.corpus)), key=lambda i: -scores[i])
        for i in ranked:
            name = self.corpus[i].name
            if name != exclude and not (exclude_suite and name.startswith(f"{exclude_suite}/")):
                return self.corpus[i], float(scores[i])
        return None
