"""evolve/export.py: the winner per task, and its second timing at export."""
import sys
import threading
from concurrent.futures import Future

from archives.archive import Archive
from evolve.export import export
from evolve.task_search import SearchConfig, Shared, TaskSearch
from fitness.engine.launch_configs import KernelConfig
from operators.registry import knob_operators
from tests.test_task_search import FakeEvaluator, Untimeable, search


def _searched(tmp_path, builtin):
    ts, archive, run_id, _ = search(tmp_path, builtin, generations=2)
    ts.run()
    return archive, run_id


def test_the_exported_speedup_is_the_second_measurement(tmp_path, builtin):
    archive, run_id = _searched(tmp_path, builtin)
    timed = []

    def retime(name, source):
        timed.append((name, source))
        return 0.5 if len(timed) == 1 else 0.25  # the winner, then the starting kernel

    e = export(archive, run_id, "builtin", ["softmax"], tmp_path / "out", retime=retime)["tasks"][0]
    best = archive.candidate(e["candidate"])
    assert timed[0] == ("softmax", best.source) and len(timed) == 2
    assert e["speedup"] == 0.5 and e["start_speedup"] == 0.25 and e["vs_start"] == 2.0
    assert e["search_speedup"] > 1.0 and e["search_start_speedup"] != e["search_speedup"]
    header = (tmp_path / "out" / "softmax.py").read_text().splitlines()[1]
    assert "speedup 0.500x" in header and f"{e['search_speedup']:.3f}x during the search" in header


def test_a_failed_second_timing_keeps_the_search_measurement(tmp_path, builtin):
    archive, run_id = _searched(tmp_path, builtin)
    plain = export(archive, run_id, "builtin", ["softmax"], tmp_path / "a")["tasks"][0]
    e = export(archive, run_id, "builtin", ["softmax"], tmp_path / "b", retime=lambda n, s: None)["tasks"][0]
    assert e["speedup"] == plain["speedup"] and "search_speedup" not in e and "retime_note" in e
    assert "search_speedup" not in plain and "timed again" not in (tmp_path / "a" / "softmax.py").read_text()


def test_an_earlier_runs_file_for_a_task_without_a_kernel_now_is_removed(tmp_path, builtin):
    archive, run_id = _searched(tmp_path, builtin)
    out = tmp_path / "out"
    out.mkdir()
    (out / "layernorm.py").write_text("# triton-evolve export: suite builtin, task layernorm: candidate 7\n")
    (out / "notes.py").write_text("# the user's own file\n")
    summary = export(archive, run_id, "builtin", ["softmax", "layernorm", "notes"], out)
    assert [e["status"] for e in summary["tasks"]] == ["exported", "not started", "not started"]
    assert not (out / "layernorm.py").exists() and (out / "notes.py").exists()
    assert (out / "softmax.py").read_text().startswith("# triton-evolve export: suite builtin, task softmax")


def test_the_summary_says_why_a_task_has_no_kernel_when_its_start_cannot_be_timed(tmp_path, builtin):
    archive = Archive(tmp_path / "a.db")
    run_id = archive.new_run("builtin", {})
    TaskSearch(builtin["softmax"], knob_operators(), SearchConfig(islands=2, population=3, generations=2),
               Shared(archive, run_id, Untimeable().submit, threading.Event())).run()
    e = export(archive, run_id, "builtin", ["softmax"], tmp_path / "out")["tasks"][0]
    assert e["status"] == "no correct kernel" and e["note"] == (
        "its starting kernel cannot be timed here: timing: torch.AcceleratorError: CUDA error: "
        "an illegal memory access was encountered")


def test_the_exported_header_names_the_build_its_timing_ran(tmp_path, builtin):
    """An autotuner in the user's process may pick another config than the search's timing did:
    the header names the one timed, per shape, so that it can be pinned."""
    built = KernelConfig("softmax_kernel", (("BLOCK", 1024),), num_warps=8, num_stages=3, shapes=("{'rows': 4096}",))

    class Configured(FakeEvaluator):
        def submit(self, task, source):
            v = super().submit(task, source).result()
            v.configs = [built]
            f = Future()
            f.set_result(v)
            return f

    archive = Archive(tmp_path / "a.db")
    run_id = archive.new_run("builtin", {})
    TaskSearch(builtin["softmax"], knob_operators(), SearchConfig(islands=1, population=2, generations=1),
               Shared(archive, run_id, Configured().submit, threading.Event())).run()
    export(archive, run_id, "builtin", ["softmax"], tmp_path / "out")
    lines = (tmp_path / "out" / "softmax.py").read_text().splitlines()
    assert lines[2] == "# timed build: softmax_kernel(BLOCK=1024, num_warps=8, num_stages=3) on {'rows': 4096}"
    assert lines[3].startswith("# reproduce: python run.py check")


def test_the_exported_header_reproduces_with_the_command_the_user_runs(tmp_path, builtin, monkeypatch):
    """Installed, the user types `triton-evolve`: the header's check command says so."""
    archive, run_id = _searched(tmp_path, builtin)
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "bin" / "triton-evolve"), "--suite", "builtin"])
    export(archive, run_id, "builtin", ["softmax"], tmp_path / "out")
    out = tmp_path / "out" / "softmax.py"
    reproduce = out.read_text().splitlines()[2]
    assert reproduce == f"# reproduce: triton-evolve check --suite builtin --task softmax {out}"
