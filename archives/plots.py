"""The report's pictures (matplotlib, Agg, PNG). Each function draws one figure from the analysis
dict and returns its file name, or None when there is nothing to draw; `draw_all` returns the
figures made and a note when matplotlib is not installed (the report then has tables only)."""
from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    return plt


def _nothing(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _scaling(report: dict, key: str, xkey: str, xlabel: str, title: str, out: Path, name: str) -> str | None:
    points = report["scaling"][key]
    if not points:
        return None
    plt = _plt()
    xs = [p[xkey] for p in points]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    sp = [(x, p["geomean_speedup"]) for x, p in zip(xs, points) if p["geomean_speedup"] is not None]
    if sp:
        a.plot([x for x, _ in sp], [y for _, y in sp], "o-", color="#1f77b4")
        a.axhline(1.0, color="#999", lw=0.8, ls="--")
        a.set_ylabel("geometric-mean best speedup")
    else:
        _nothing(a, "no kernel was timed in this run\n(CPU / Triton interpreter): no speedup")
    a.set_xlabel(xlabel)
    a.set_title("best speedup (failed task = 1.0)")
    series = [("solved_share", "tasks with a correct kernel", "s-", "#2ca02c"),
              ("exec_accuracy", "execution accuracy (cumulative)", "o-", "#d62728"),
              ("call_accuracy", "call accuracy (cumulative)", "^-", "#9467bd")]
    if key == "by_generation":
        series.append(("exec_accuracy_this_generation", "execution accuracy of this generation", "x--", "#ff7f0e"))
    for field, label, style, color in series:
        pts = [(x, p[field]) for x, p in zip(xs, points) if p.get(field) is not None]
        if pts:
            b.plot([x for x, _ in pts], [100 * y for _, y in pts], style, label=label, color=color)
    b.set_ylim(-5, 105)
    b.set_ylabel("%")
    b.set_xlabel(xlabel)
    b.set_title("accuracy")
    b.legend(fontsize=7, loc="lower right")
    for ax in (a, b):
        ax.set_xticks(xs)
    fig.suptitle(title)
    return _save(plt, fig, out, name)


def speedup_by_category(report: dict, out: Path) -> str | None:
    tasks = [t for t in report["tasks"] if t["task"] not in {i["task"] for i in report["invalid"]}]
    cats = sorted({t["category"] for t in tasks})
    if not cats or not report["timed"]:
        return None  # an empty picture says less than the note draw_all gives
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(cats) + 2), 3.6))
    data = []
    for c in cats:
        data.append([t["speedup"] if t["solved"] else 1.0 for t in tasks
                     if t["category"] == c and (t["speedup"] is not None or not t["solved"])])
    ax.boxplot([d if d else [float("nan")] for d in data], showfliers=False)
    for i, d in enumerate(data, start=1):
        ax.plot([i] * len(d), d, "o", alpha=0.7, color="#1f77b4")
    ax.axhline(1.0, color="#999", lw=0.8, ls="--")
    ax.set_xticks(range(1, len(cats) + 1))
    ax.set_xticklabels([f"{c}\n({len(d)})" for c, d in zip(cats, data)], fontsize=8)
    ax.set_ylabel("best speedup per task")
    ax.set_title("speedup distribution per category (failed task = 1.0)")
    return _save(plt, fig, out, "speedup_by_category.png")


def _save(plt, fig, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=100)
    plt.close(fig)
    return name


def llm_cost(report: dict, out: Path) -> str | None:
    curve = report["cost_curve"]
    if not curve:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.step([p["tokens"] / 1e3 for p in curve], [p["geomean_speedup"] for p in curve], where="post")
    ax.axhline(1.0, color="#999", lw=0.8, ls="--")
    ax.set_xlabel("LLM tokens spent (thousands, prompt + completion)")
    ax.set_ylabel("geometric-mean best speedup")
    ax.set_title("LLM cost against best speedup")
    return _save(plt, fig, out, "llm_cost.png")


def draw_all(report: dict, out: Path) -> tuple[list[tuple[str, str]], str | None]:
    """[(file name, caption)], and a note on the plots skipped and why."""
    try:
        _plt()
    except ImportError:
        return [], "plots skipped: matplotlib is not installed (pip install matplotlib)"
    out.mkdir(parents=True, exist_ok=True)
    made = [
        (_scaling(report, "by_generation", "generation", "generation (everything up to it)",
                  "sequential scaling", out, "scaling_generations.png"),
         "Sequential scaling: the figures over all candidates up to each generation."),
        (_scaling(report, "by_islands", "islands", "islands used (the first j)", "parallel scaling", out,
                  "scaling_islands.png"),
         "Parallel scaling: the figures over the first j islands, all generations."),
        (speedup_by_category(report, out), "Best speedup of each task, by category (count in brackets)."),
        (llm_cost(report, out), "Tokens spent on LLM calls against the geometric-mean best speedup reached."),
    ]
    skipped = []
    if not report["timed"]:
        skipped.append("the speedup distribution per category (no kernel was timed)")
    if not report["llm"]["calls"]:
        skipped.append("LLM cost against speedup (no LLM calls in this run)")
    elif not report["cost_curve"]:
        skipped.append("LLM cost against speedup (no correct kernel was timed)")
    note = ("not drawn: " + "; ".join(skipped)) if skipped else None
    return [(f, cap) for f, cap in made if f], note
