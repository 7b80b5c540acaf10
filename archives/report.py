"""`run.py report`: an archive -> report/index.html (tables, plots embedded: one file that reads
offline), report/summary.md (plots linked from report/plots/), report/report.json, and with
--json the same JSON on stdout.

Tables are built once as (title, headers, rows) and rendered to both HTML and Markdown, so the
two cannot disagree.
"""
from __future__ import annotations

import base64
import html
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from archives import analysis, kernel_view, kernels, metrics, plots
from archives.kernels import KernelSection
from archives.report_data import ReportError, load, read_invalid_file

RULES = [
    "Call accuracy: share of generated kernels (the starting kernel left out) that compiled and ran on every "
    "correctness case; execution accuracy: share that were also correct on the tuning shapes. Suite figures: "
    "mean over tasks of the per-task rates (the pooled rate over all kernels beside it).",
    "Best kernel of a task: the fastest kernel correct on the tuning and the held-out shapes (the export's "
    "choice; the starting kernel competes). Speedup is against the run's baseline (see the verdicts).",
    "Speedup means: a task with no correct kernel counts as 1.0 (the user keeps the baseline); a correct "
    "kernel that was never timed leaves its task out; no timed task at all: n/a. The means over solved tasks "
    "only are given beside them.",
    "fast_p (KernelBench): share of tasks whose best kernel is correct and faster than p times the baseline; "
    "fast_0 is the share with a correct kernel; an untimed kernel is not counted as fast.",
    "pass@k: each island is an independent run; it succeeds when it made a correct kernel. Unbiased estimator "
    "1 - C(n-c,k)/C(n,k) per task, each k on its own, mean over tasks; n/a where k > n islands. "
    "fast1@k: the same with success = a correct kernel faster than the baseline.",
    "SOL%: per timed shape, the roofline time (bytes / measured copy bandwidth or FLOPs / measured matmul "
    "peak, the larger) over the best kernel's time, i.e. its achieved bandwidth or FLOP rate over the "
    "device's measured peak; geometric mean over shapes.",
    "Held-out generalization: share of tasks whose search pick (fastest kernel correct on the tuning shapes) "
    "is also correct on the held-out shapes never shown to the search: P(held-out correct | tuning correct).",
    "Tasks invalid on this hardware are listed and left out of every figure.",
    "Sessions: one row per command that searched (a resumed run has several). Per minute: evaluations "
    "recorded over the command's search wall time (export not included). GPU measuring turn: the time "
    "the GPU's one measuring turn (the trials alone) was held over that wall time (the GPU is what is measured); "
    "A/A: the starting kernels timed against themselves during the session (median and p90 of |A/A - 1|); "
    "correctness workers busy: their summed serving time over wall time x workers.",
]


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def times(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}x"


def num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if v is None else fmt.format(v)


GROUP_HEADERS = ["group", "tasks", "solved", "call acc", "exec acc", "geomean speedup", "mean", "median",
                 "fast_0", "fast_1", "fast_1.5", "fast_2", "pass@1", "pass@2", "pass@5", "pass@10", "SOL%",
                 "held-out gen."]


def group_row(name: str, g: dict) -> list[str]:
    sp = g["speedup"]
    return [name, str(g["tasks"]), str(g["solved"]), pct(g["call_accuracy"]), pct(g["exec_accuracy"]),
            times(sp["geomean"]), times(sp["mean"]), times(sp["median"]),
            *[pct(g["fast_p"][p]) for p in metrics.FAST_P], *[pct(g["pass_at_k"][k]) for k in metrics.PASS_K],
            pct(g["sol"]["geomean"]), pct(g["heldout_generalization"])]


def suite_table(r: dict) -> tuple:
    s = r["suite"]
    sp, so = s["speedup"], s["speedup_solved_only"]
    rows = [
        ["tasks counted / solved", f"{s['tasks']} / {s['solved']}"],
        ["call accuracy (mean over tasks; pooled)", f"{pct(s['call_accuracy'])}; {pct(s['call_accuracy_pooled'])} "
                                                    f"of {s['generated']} kernels"],
        ["execution accuracy (mean over tasks; pooled)", f"{pct(s['exec_accuracy'])}; "
                                                         f"{pct(s['exec_accuracy_pooled'])}"],
        ["best speedup: geometric mean (failed = 1.0)", f"{times(sp['geomean'])} over {sp['n']} task(s)"],
        ["best speedup: arithmetic mean / median", f"{times(sp['mean'])} / {times(sp['median'])}"],
        ["best speedup over solved tasks: geomean / mean / median",
         f"{times(so['geomean'])} / {times(so['mean'])} / {times(so['median'])}"],
        *[[f"fast_{p:g}", pct(s["fast_p"][p])] for p in metrics.FAST_P],
        *[[f"pass@{k}", pct(s["pass_at_k"][k])] for k in metrics.PASS_K],
        ["fast1@1 / fast1@2 / fast1@5 / fast1@10", " / ".join(pct(s["fast1_at_k"][k]) for k in metrics.PASS_K)],
        ["SOL% of best kernels: geomean / median", f"{pct(s['sol']['geomean'])} / {pct(s['sol']['median'])} "
                                                   f"over {s['sol']['n']} timed task(s)"],
        ["held-out generalization: P(held-out correct | tuning correct), search picks",
         f"{pct(s['heldout_generalization'])} of {s['heldout_generalization_n']} task(s)"],
        ["held-out correct among all tuning-correct generated kernels", pct(s["heldout_pooled"])],
    ]
    return f"Suite (setting {r['setting']})", ["metric", "value"], rows


def setting_table(r: dict) -> tuple:
    """GEAK's figures, per setting: a report shows one run, so one row, named by its setting."""
    s = r["suite"]
    return ("Accuracy by setting (GEAK's way: a task is solved when its exported kernel passes)",
            ["setting", "tasks", "call accuracy", "execution accuracy",
             *[f"pass@{k}" for k in metrics.PASS_K]],
            [[r["setting"], str(s["tasks"]), pct(s["task_call_accuracy"]), pct(s["task_exec_accuracy"]),
              *[pct(s["pass_at_k"][k]) for k in metrics.PASS_K]]])


def task_table(r: dict) -> tuple:
    invalid = {i["task"] for i in r["invalid"]}
    headers = ["task", "category", "diff.", "evaluated", "call acc", "exec acc", "best kernel", "speedup",
               "vs start", "SOL%", "GB/s", "TFLOP/s", "pass@1", "pass@2", "pass@5", "pass@10", "held-out"]
    rows = []
    for t in r["tasks"]:
        b = t["best"]
        where = "every island" if b and b["island"] < 0 else f"island {b['island']}" if b else ""
        best = f"#{b['id']} {b['operator']} ({where}, gen {b['generation']})" if b else "none correct"
        ach = t["achieved"] or {}
        gen = {True: "generalizes", False: "FAILS", None: "n/a"}[t["generalizes"]]
        ev = f"{t['evaluated']}" + (f" (+{t['pending']} pending)" if t["pending"] else "")
        name = t["task"] + (" (invalid here: not counted)" if t["task"] in invalid else "")
        rows.append([name, t["category"], str(t["difficulty"] if t["difficulty"] is not None else "?"), ev,
                     pct(t["call_accuracy"]), pct(t["exec_accuracy"]), best, times(t["speedup"]),
                     times(t["vs_start"]), pct(t["sol"]), num(ach.get("GBps")), num(ach.get("TFLOPs"), "{:.2f}"),
                     *[pct(t["pass_at_k"][k]) for k in metrics.PASS_K], gen])
    return "Tasks", headers, rows


def tables(r: dict) -> list[tuple]:
    out = [suite_table(r), setting_table(r)]
    out.append(("By difficulty", GROUP_HEADERS, [group_row(k, g) for k, g in r["by_difficulty"].items()]))
    out.append(("By category", GROUP_HEADERS, [group_row(k, g) for k, g in r["by_category"].items()]))
    out.append(task_table(r))
    if r["invalid"]:
        out.append(("Invalid on this hardware (listed, not counted)", ["task", "why"],
                    [[i["task"], i["reason"]] for i in r["invalid"]]))
    if r["sessions"]:
        out.append(("Sessions (throughput)", ["session", "started", "wall", "evaluations", "per minute",
                                              "steady state per minute", "GPU measuring turn",
                                              "correctness workers busy",
                                              "A/A |A/A-1| median / p90 (n)", "ended"],
                    [[str(s["id"]), time.strftime("%Y-%m-%d %H:%M", time.localtime(s["started"] or 0)),
                      f"{s['wall_s']:.0f} s", str(s["evaluations"]), f"{s['per_min']:.1f}",
                      "-" if s["steady_per_min"] is None else f"{s['steady_per_min']:.1f}", pct(s["timing_busy"]),
                      f"{pct(s['correctness_busy'])} of {s['workers']}", _aa_cell(s), s["status"] or "?"]
                     for s in r["sessions"]]))
        units = [(s["id"], u) for s in r["sessions"] for u in s.get("units", [])]
        if len({u["unit"] for _, u in units}) > 1:  # a cluster's sessions: each GPU's share of the work
            out.append(("Per device (evaluation units)", ["session", "unit", "device", "evaluations", "per minute",
                                                          "GPU measuring turn", "correctness workers busy"],
                        [[str(sid), u["unit"], u["device"], str(u["evaluations"]), f"{u['per_min']:.1f}",
                          pct(u["timing_busy"]), pct(u["correctness_busy"])] for sid, u in units]))
    llm = r["llm"]
    if llm["calls"]:
        out.append(("LLM calls", ["calls", "errors", "prompt tokens", "completion tokens", "latency (s)", "models"],
                    [[str(llm["calls"]), str(llm["errors"]), str(llm["prompt_tokens"]), str(llm["completion_tokens"]),
                      f"{llm['latency_s']:.0f}", ", ".join(llm["models"])]]))
        out.append(("LLM calls per task", ["task", "calls", "tokens", "best speedup"],
                    [[t["task"], str(t["calls"]), str(t["tokens"]), times(t["speedup"])] for t in llm["per_task"]]))
    return out


def _aa_cell(s: dict) -> str:
    if not s.get("aa_n"):
        return "-"
    return f"{100 * s['aa_median']:.2f}% / {100 * s['aa_p90']:.2f}% ({s['aa_n']})"


def notes(r: dict) -> list[str]:
    run = r["run"]
    out = []
    if r["live"]:
        age = r["read_at"] - r["last_write"]
        out.append(f"Run {run['id']} is still running (or was stopped without a clean exit; last write "
                   f"{age:.0f} s before this report): the figures are a snapshot of what it had committed.")
    if not any(t["evaluated"] for t in r["tasks"]):
        out.append("No evaluation has been recorded yet: every figure is n/a.")
    if not r["timed"]:
        out.append("No kernel was timed in this run (CPU / Triton interpreter, or no timing succeeded): "
                   "speedup, fast_p for p > 0 and SOL% are n/a.")
    if r["invalid"]:
        out.append(f"{len(r['invalid'])} task(s) invalid on this hardware are listed and not counted.")
    if "not loadable" in r["tasks_source"]:
        out.append(f"Categories and difficulties unknown: {r['tasks_source']}.")
    if run["runs_in_archive"] > 1:
        out.append(f"The archive holds {run['runs_in_archive']} runs; this report is of run {run['id']} "
                   "(choose with --run).")
    return out


def _html_table(title, headers, rows) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h2>{html.escape(title)}</h2>\n<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"


def _md_table(title, headers, rows) -> str:
    esc = lambda c: str(c).replace("|", "\\|")
    lines = [f"## {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}
tbody tr:nth-child(even){background:#fafafa}.note{background:#fff6d6;border:1px solid #e6cf7a;padding:6px 10px;
margin:4px 0}.live{background:#ffe0e0;border-color:#d88}figure{display:inline-block;margin:0 1em 1em 0}
figcaption{font-size:12px;color:#555}img{max-width:100%;border:1px solid #ddd}.meta{color:#555;font-size:13px}"""


def _header(r: dict) -> tuple[str, str]:
    run = r["run"]
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(run["started"])) if run["started"] else "?"
    title = f"triton-evolve report: suite {run['suite']}, run {run['id']}, setting {r['setting']}"
    cfg = run["config"]
    meta = (f"archive {r['archive']}; run started {started}, status {run['status']}; "
            f"{cfg.get('islands', '?')} island(s) x {cfg.get('population', '?')}, "
            f"{cfg.get('generations', '?')} generation(s), operators {cfg.get('operators', '?')}; "
            f"device(s): {', '.join(r['devices']) or 'none recorded'}; tasks from {r['tasks_source']}")
    return title, meta


def render_html(r: dict, figures: list[tuple[str, str]], plot_dir: Path, plot_note: str | None,
                secs: Sequence[KernelSection] = (), refresh: float | None = None) -> str:
    """The page; `refresh`: seconds after which the browser reloads it (--watch, while the run is live)."""
    title, meta = _header(r)
    reload = f"<meta http-equiv='refresh' content='{max(1, round(refresh))}'>" if refresh else ""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>{reload}<title>{html.escape(title)}</title>"
             f"<style>{CSS}\n{kernel_view.CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p class='meta'>{html.escape(meta)}</p>"]
    for n in notes(r):
        cls = "note live" if n.startswith("Run ") and "still running" in n else "note"
        parts.append(f"<div class='{cls}'>{html.escape(n)}</div>")
    for t in tables(r):
        parts.append(_html_table(*t))
    parts.append(kernel_view.render_html(list(secs)))
    parts.append("<h2>Plots</h2>")
    if plot_note:
        parts.append(f"<div class='note'>{html.escape(plot_note)}</div>")
    for name, caption in figures:
        data = base64.b64encode((plot_dir / name).read_bytes()).decode()  # embedded: one file, offline
        parts.append(f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts.append("<h2>How the figures are computed</h2><ul>")
    parts += [f"<li>{html.escape(rule)}</li>" for rule in RULES]
    parts.append("</ul></body></html>\n")
    return "\n".join(parts)


def render_md(r: dict, figures: list[tuple[str, str]], plot_note: str | None,
              secs: Sequence[KernelSection] = ()) -> str:
    title, meta = _header(r)
    parts = [f"# {title}", "", meta, ""]
    parts += [f"> {n}\n" for n in notes(r)]
    parts += [_md_table(*t) for t in tables(r)]
    parts.append(kernel_view.render_md(list(secs)))
    parts.append("## Plots\n")
    if plot_note:
        parts.append(f"> {plot_note}\n")
    parts += [f"![{cap}](plots/{name})\n" for name, cap in figures]
    parts.append("## How the figures are computed\n")
    parts += [f"- {rule}" for rule in RULES]
    return "\n".join(parts) + "\n"


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a browser reloading the page under --watch never reads half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def build(archive: str, out: str | Path = "report", run_id: int | None = None, invalid_file: str | None = None,
          load_tasks: bool = True, refresh: float | None = None) -> tuple[dict, Path]:
    """Reads the archive and writes the report into `out`; `refresh`: the page reloads itself
    after that many seconds while the run is live (--watch)."""
    invalid = read_invalid_file(invalid_file) if invalid_file else None
    data = load(archive, run_id, invalid, load_tasks)
    report = analysis.analyze(data)
    secs = kernels.sections(data.rows)
    report["kernels"] = [kernels.as_json(k) for k in secs]
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        figures, plot_note = plots.draw_all(report, out / "plots")
        report["plots"] = [f"plots/{f}" for f, _ in figures]
        report["plots_note"] = plot_note
        report["notes"] = notes(report)
        _write(out / "index.html", render_html(report, figures, out / "plots", plot_note, secs,
                                               refresh if report["live"] else None))
        _write(out / "summary.md", render_md(report, figures, plot_note, secs))
        _write(out / "report.json", json.dumps(report, indent=1))
    except OSError as e:
        raise ReportError(f"cannot write the report to {out}: {e.strerror or e}") from None
    return report, out


def summary(report: dict[str, Any], out: Path) -> str:
    """The one line a report command prints."""
    s = report["suite"]
    return (f"report of run {report['run']['id']} ({report['run']['status']}): {s['tasks']} task(s), "
            f"{s['solved']} with a correct kernel, geomean speedup {times(s['speedup']['geomean'])}, "
            f"fast_1 {pct(s['fast_p'][1.0])}, pass@1 {pct(s['pass_at_k'][1])} -> {out / 'index.html'}")


def watch(archive: str, out_dir: str, run_id: int | None, invalid: str | None, every: float,
          say: Callable[[str], None] = print) -> int:
    """Rewrites the report every `every` seconds while the run is live; returns 0 once the run is
    no longer running (after a last report) or on Ctrl-C. A failure to read on the first pass is
    the user's (exit 2); later ones (the writer mid-checkpoint, a full disk) are reported and retried."""
    out, first = Path(out_dir), True
    try:
        while True:
            try:
                report, out = build(archive, out_dir, run_id, invalid, refresh=every)
            except ReportError as e:
                if first:
                    print(f"error: {e}", file=sys.stderr)
                    return 2
                print(f"warning: {e} (trying again in {every:g} s)", file=sys.stderr, flush=True)
            else:
                say(time.strftime("%H:%M:%S ") + summary(report, out))
                if not report["live"]:
                    say(f"run {report['run']['id']} is {report['run']['status']}: stopped watching; "
                        f"the report is at {out / 'index.html'}")
                    return 0
            first = False
            time.sleep(every)
    except KeyboardInterrupt:
        say(f"stopped watching (Ctrl-C); the report is at {out / 'index.html'}")
        return 0


def cmd_report(archive: str, out_dir: str, run_id: int | None = None, invalid: str | None = None,
               as_json: bool = False, watch_s: float | None = None) -> int:
    """The CLI: exit 0 with a report written, 2 with one line on stderr when nothing can be
    reported; with `watch_s`, rewrites it every so many seconds while the run is live."""
    if watch_s is not None:
        return watch(archive, out_dir, run_id, invalid, watch_s, lambda line: print(line, flush=True))
    try:
        report, out = build(archive, out_dir, run_id, invalid)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    line = summary(report, out)
    if as_json:
        print(json.dumps(report, indent=1))
        print(line, file=sys.stderr)
    else:
        print(line)
        for n in report["notes"]:
            print(f"note: {n}")
        if report["plots_note"]:
            print(f"note: {report['plots_note']}")
    return 0
