"""The report's kernel sections (archives.kernels) as HTML and as Markdown: per task a collapsible
block with the lineage, the per-shape times, the verdict's flags, the diff against the starting
kernel and the source. Everything from the archive is escaped: a kernel's source and an
operator's note are text written by an LLM.
"""
from __future__ import annotations

import html
import re

from archives.kernels import KernelSection, measured_speedup, shape_text
from fitness.common.flags import Flag

TITLE = "Best kernels"
INTRO = ("Per task, the kernel the export takes (the fastest correct on the tuning and held-out shapes): how it "
         "descends from the starting kernel (first parents; a crossover's other parents are named), its time on "
         "each timed tuning shape against the baseline, the verdict's flags, and its diff and source.")
FLAG_NOTES = {
    Flag.UNTIMED_NO_GPU.value: "not timed: no GPU here (correctness ran under the Triton interpreter)",
    Flag.UNTIMED.value: "not timed: the suite gives no benchmark inputs for this task",
    Flag.TIMING_FAILED.value: "correct, but the timing worker could not time it",
    Flag.NOISY_TIMING.value: "a shape's trials spread more than 10% (interquartile range over median)",
    Flag.NOT_REPLAYABLE.value: "the replay cannot model this call (the engine's limit, named in the reason), "
                               "so it was not judged: not the kernel's failure",
    Flag.ENGINE_OUT_OF_MEMORY.value: "the evaluator's own child ran out of GPU memory even with the GPU to itself: "
                                     "not the kernel's failure",
    Flag.FASTER_THAN_ROOFLINE.value: "faster than the roofline on some shape: the timing is suspect",
    Flag.SPEEDUP_REVIEW.value: "speedup over 10x: review it before trusting it",
    Flag.INVALID_HERE.value: "the task is invalid on this hardware",
    Flag.NO_SANDBOX.value: "evaluated without the sandbox (bubblewrap missing or --no-sandbox)",
    Flag.WORKER_REPLACED.value: "an evaluation worker died during it and was replaced",
    Flag.KILLED_UNITS.value: "its evaluation killed evaluation units",
    Flag.TIMING_BIASED.value: "the baseline's code times unlike its kernels replayed: the speedup is not comparable",
    Flag.AA_SENTINEL.value: "a starting kernel timed against itself, a check of the timing's noise",
    Flag.GPU_IDLE_UNVERIFIED.value: "timed where NVML could not show whether another process used the GPU meanwhile",
}
LINEAGE_HEADERS = ["step", "kernel", "operator", "gen", "island", "stage", "speedup", "note"]
TIMES_HEADERS = ["shape", "dtype", "kernel ms", "baseline ms", "speedup", "spread"]
CSS = """details.kernel{border:1px solid #ccc;border-radius:4px;padding:4px 10px;margin:6px 0}
details.kernel>summary{cursor:pointer}pre.src{background:#f7f7f7;border:1px solid #ddd;padding:6px;
overflow-x:auto;font-size:12px}.add{color:#116329;background:#e6ffec}.del{color:#82071e;background:#ffebe9}
.hunk{color:#0550ae}.flag{background:#fff6d6;border:1px solid #e6cf7a;padding:0 4px;margin-right:4px}"""


def _speedup(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}x"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def summary_line(s: KernelSection) -> str:
    """The one line a collapsed section shows."""
    if s.best is None:
        return f"{s.task}: no kernel correct on the tuning and held-out shapes"
    b = s.best
    hops = len(s.lineage) - 1
    origin = "the starting kernel itself" if b.operator == "start" else f"{hops} step(s) from the starting kernel"
    return f"{s.task}: #{b.id} {b.operator}, speedup {_speedup(b.speedup)}, {origin}"


def lineage_rows(s: KernelSection) -> list[list[str]]:
    rows = []
    for i, x in enumerate(s.lineage):
        others = x.parent_ids[1:]  # a crossover's parents beyond the one the lineage follows
        kernel = f"#{x.id}" + (f" (+ parents {', '.join(f'#{p}' for p in others)})" if others else "")
        rows.append([str(i), kernel, x.operator, str(x.generation), "all" if x.island < 0 else str(x.island),
                     x.stage, _speedup(x.speedup), x.note])
    return rows


def times_rows(s: KernelSection) -> list[list[str]]:
    return [[shape_text(t.shape), t.dtype, _ms(t.candidate_ms), _ms(t.baseline_ms), _speedup(measured_speedup(t)),
             f"{100 * t.candidate_spread:.1f}%"] for t in s.times]


def flag_texts(s: KernelSection) -> list[str]:
    return [f"{f}: {FLAG_NOTES[f]}" if f in FLAG_NOTES else f for f in s.flags]


def notes(s: KernelSection) -> list[str]:
    """Sentences about what the section cannot show."""
    out = []
    if s.best is not None and s.broken_at is not None:
        out.append(f"The lineage stops at parent #{s.broken_at}, which is not a kernel of this run.")
    if s.best is not None and not s.times:
        out.append("No per-shape times: the kernel was not timed.")
    if s.best is not None and s.start_id is None:
        out.append("No starting kernel in the archive to diff against.")
    return out


# -- HTML ----------------------------------------------------------------------------------------
def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def diff_html(diff: str) -> str:
    """A unified diff, escaped, its added, removed and hunk lines marked for colour."""
    out = []
    for line in diff.splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")
        text = html.escape(line)
        out.append(f"<span class='{cls}'>{text}</span>" if cls else text)
    return "\n".join(out)


def section_html(s: KernelSection) -> str:
    parts = [f"<details class='kernel'><summary>{html.escape(summary_line(s))}</summary>"]
    if s.best is None:
        return parts[0] + "</details>"
    parts += [f"<div class='note'>{html.escape(n)}</div>" for n in notes(s)]
    parts.append("<h4>Lineage (starting kernel first)</h4>" + _table(LINEAGE_HEADERS, lineage_rows(s)))
    if s.times:
        parts.append("<h4>Per-shape times (tuning shapes)</h4>" + _table(TIMES_HEADERS, times_rows(s)))
    flags = "".join(f"<span class='flag'>{html.escape(f)}</span>" for f in flag_texts(s)) or "none"
    parts.append(f"<p>Flags: {flags}</p>")
    if s.diff:
        added = sum(1 for x in s.diff.splitlines() if x.startswith("+") and not x.startswith("+++"))
        removed = sum(1 for x in s.diff.splitlines() if x.startswith("-") and not x.startswith("---"))
        parts.append(f"<details><summary>Diff against the starting kernel #{s.start_id} (+{added} -{removed} "
                     f"lines)</summary><pre class='src'>{diff_html(s.diff)}</pre></details>")
    lines = len(s.best.source.splitlines())
    parts.append(f"<details><summary>Source of #{s.best.id} ({lines} lines)</summary>"
                 f"<pre class='src'>{html.escape(s.best.source)}</pre></details>")
    return "\n".join(parts) + "</details>"


def render_html(secs: list[KernelSection]) -> str:
    if not secs:
        return ""
    return "\n".join([f"<h2>{TITLE}</h2>", f"<p class='meta'>{html.escape(INTRO)}</p>",
                      *[section_html(s) for s in secs]]) + "\n"


# -- Markdown ------------------------------------------------------------------------------------
def _cell(c: str) -> str:
    """A Markdown table cell: renderers take raw HTML in Markdown, so an LLM's note is escaped."""
    return html.escape(c, quote=False).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows])


def fence(text: str, lang: str) -> str:
    """A fenced code block that the text cannot close: longer than any backtick run in it."""
    ticks = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def section_md(s: KernelSection) -> str:
    parts = [f"### {_cell(summary_line(s))}", ""]
    if s.best is None:
        return "\n".join(parts)
    parts += [f"> {n}\n" for n in notes(s)]
    parts += ["Lineage (starting kernel first):", "", _md_table(LINEAGE_HEADERS, lineage_rows(s)), ""]
    if s.times:
        parts += ["Per-shape times (tuning shapes):", "", _md_table(TIMES_HEADERS, times_rows(s)), ""]
    parts += ["Flags: " + ("; ".join(f"`{f}`" for f in flag_texts(s)) or "none"), ""]
    if s.diff:
        parts += [f"<details><summary>Diff against the starting kernel #{s.start_id}</summary>", "",
                  fence(s.diff, "diff"), "", "</details>", ""]
    parts += [f"<details><summary>Source of #{s.best.id}</summary>", "", fence(s.best.source, "python"), "",
              "</details>", ""]
    return "\n".join(parts)


def render_md(secs: list[KernelSection]) -> str:
    if not secs:
        return ""
    return "\n".join([f"## {TITLE}", "", INTRO, "", *[section_md(s) for s in secs]]) + "\n"
