"""archives/plots.py: each figure drawn (real matplotlib, Agg) from an analysis dict of the shape
archives.analysis builds, read back from the PNG it wrote: its size, and which series' colours
are on it. (The report that embeds them: tests/test_report.py.)"""
import matplotlib.image
import numpy as np
import pytest

from archives import plots

BLUE, GREEN, RED, PURPLE, ORANGE = (31, 119, 180), (44, 160, 44), (214, 39, 40), (148, 103, 189), (255, 127, 14)
POINT = (98, 160, 203)  # the category figure's points: blue at alpha 0.7 on white


def pixels(path, colour) -> int:
    img = (matplotlib.image.imread(path)[:, :, :3] * 255).round().astype(int)
    return int((np.abs(img - np.array(colour)).max(axis=2) <= 12).sum())


def size(path) -> tuple[int, int]:
    h, w = matplotlib.image.imread(path).shape[:2]
    return w, h


def point(x_key, x, speedup, solved=0.5, exec_=0.25, call=0.75, this_gen=0.1):
    return {x_key: x, "geomean_speedup": speedup, "solved_share": solved, "exec_accuracy": exec_,
            "call_accuracy": call, "exec_accuracy_this_generation": this_gen}


def report(*, timed=True, speedups=(1.0, 1.5, 2.0), tasks=None, invalid=(), calls=0, curve=()):
    return {
        "scaling": {"by_generation": [point("generation", g, s) for g, s in enumerate(speedups)],
                    "by_islands": [point("islands", i + 1, s) for i, s in enumerate(speedups[:2])]},
        "tasks": tasks if tasks is not None else [
            {"task": "softmax", "category": "reduction", "speedup": 2.0, "solved": True},
            {"task": "row_sum", "category": "reduction", "speedup": None, "solved": False},
            {"task": "matmul", "category": "matmul", "speedup": 1.2, "solved": True}],
        "invalid": [{"task": t, "reason": "x"} for t in invalid],
        "timed": timed,
        "llm": {"calls": calls},
        "cost_curve": list(curve),
    }


def test_a_run_with_timings_and_llm_calls_gets_all_four_figures_and_no_note(tmp_path):
    out = tmp_path / "deep" / "plots"  # made as needed
    made, note = plots.draw_all(report(calls=3, curve=[{"tokens": 1000, "geomean_speedup": 1.0},
                                                       {"tokens": 5000, "geomean_speedup": 1.4}]), out)
    assert [f for f, _ in made] == ["scaling_generations.png", "scaling_islands.png", "speedup_by_category.png",
                                    "llm_cost.png"]
    assert all(caption.endswith(".") for _, caption in made) and note is None
    assert sorted(p.name for p in out.iterdir()) == sorted(f for f, _ in made)
    assert size(out / "scaling_generations.png") == (1000, 360) and size(out / "llm_cost.png") == (600, 360)
    assert pixels(out / "llm_cost.png", BLUE) > 50  # the step line


def test_a_run_with_nothing_timed_and_no_llm_gets_the_scaling_figures_and_a_note_of_the_others(tmp_path):
    made, note = plots.draw_all(report(timed=False, speedups=(None, None)), tmp_path)
    assert [f for f, _ in made] == ["scaling_generations.png", "scaling_islands.png"]
    assert note == ("not drawn: the speedup distribution per category (no kernel was timed); "
                    "LLM cost against speedup (no LLM calls in this run)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scaling_generations.png", "scaling_islands.png"]


def test_llm_calls_without_a_timed_correct_kernel_say_so_instead_of_a_cost_figure(tmp_path):
    made, note = plots.draw_all(report(calls=2), tmp_path)
    assert "llm_cost.png" not in [f for f, _ in made] and not (tmp_path / "llm_cost.png").exists()
    assert note == "not drawn: LLM cost against speedup (no correct kernel was timed)"


def test_the_speedup_line_is_drawn_only_when_a_kernel_was_timed(tmp_path):
    (tmp_path / "timed").mkdir()
    (tmp_path / "untimed").mkdir()
    assert plots._scaling(report(), "by_generation", "generation", "g", "t", tmp_path / "timed", "a.png") == "a.png"
    assert plots._scaling(report(speedups=(None, None, None)), "by_generation", "generation", "g", "t",
                          tmp_path / "untimed", "a.png") == "a.png"
    timed, untimed = tmp_path / "timed" / "a.png", tmp_path / "untimed" / "a.png"
    assert pixels(timed, BLUE) > 200 and pixels(untimed, BLUE) == 0
    for png in (timed, untimed):  # the accuracy panel either way
        assert pixels(png, GREEN) > 50 and pixels(png, RED) > 50 and pixels(png, PURPLE) > 50


def test_only_the_figure_over_generations_shows_the_accuracy_of_each_generation(tmp_path):
    made, _ = plots.draw_all(report(), tmp_path)
    assert pixels(tmp_path / "scaling_generations.png", ORANGE) > 50
    assert pixels(tmp_path / "scaling_islands.png", ORANGE) == 0


def test_a_series_with_no_values_is_left_out_of_the_accuracy_panel(tmp_path):
    r = report()
    for p in r["scaling"]["by_generation"]:
        p["exec_accuracy"] = None
    plots._scaling(r, "by_generation", "generation", "g", "t", tmp_path, "a.png")
    assert pixels(tmp_path / "a.png", RED) == 0 and pixels(tmp_path / "a.png", GREEN) > 50


def test_no_points_means_no_scaling_figure(tmp_path):
    r = report()
    r["scaling"]["by_islands"] = []
    assert plots._scaling(r, "by_islands", "islands", "i", "t", tmp_path, "i.png") is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("n_cats, width", [(1, 500), (2, 500), (4, 680), (6, 920)])
def test_the_category_figure_widens_with_the_number_of_categories(tmp_path, n_cats, width):
    tasks = [{"task": f"t{i}", "category": f"c{i}", "speedup": 1.0 + i, "solved": True} for i in range(n_cats)]
    assert plots.speedup_by_category(report(tasks=tasks), tmp_path) == "speedup_by_category.png"
    assert size(tmp_path / "speedup_by_category.png") == (width, 360)


def test_tasks_invalid_here_are_left_out_of_the_category_figure(tmp_path):
    tasks = [{"task": f"t{i}", "category": f"c{i}", "speedup": 2.0, "solved": True} for i in range(4)]
    plots.speedup_by_category(report(tasks=tasks, invalid=["t2", "t3"]), tmp_path)
    assert size(tmp_path / "speedup_by_category.png") == (500, 360)  # two categories drawn, not four
    assert plots.speedup_by_category(report(tasks=tasks, invalid=["t0", "t1", "t2", "t3"]), tmp_path / "x") is None


def test_no_category_figure_when_nothing_was_timed(tmp_path):
    assert plots.speedup_by_category(report(timed=False), tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_an_unsolved_task_counts_as_speedup_one_and_a_category_with_no_points_is_still_drawn(tmp_path):
    tasks = [{"task": "a", "category": "solved_untimed", "speedup": None, "solved": True},
             {"task": "b", "category": "failed", "speedup": None, "solved": False},
             {"task": "c", "category": "timed", "speedup": 3.0, "solved": True}]
    assert plots.speedup_by_category(report(tasks=tasks), tmp_path) == "speedup_by_category.png"
    assert size(tmp_path / "speedup_by_category.png") == (560, 360)
    # a point for "failed" (at 1.0) and for "timed"; none for a solved task that was not timed
    assert pixels(tmp_path / "speedup_by_category.png", POINT) > 20
    (tmp_path / "one").mkdir()
    plots.speedup_by_category(report(tasks=tasks[:1] + tasks[2:]), tmp_path / "one")
    two_points, one_point = (pixels(d / "speedup_by_category.png", POINT) for d in (tmp_path, tmp_path / "one"))
    assert one_point > 10 and two_points > 1.5 * one_point


def test_no_cost_figure_without_a_cost_curve(tmp_path):
    assert plots.llm_cost(report(), tmp_path) is None and list(tmp_path.iterdir()) == []
