"""Where suite data comes from: --suite-path, TRITON_EVOLVE_DATA, else a cache filled by
downloading the pinned upstream commit (here from a local HTTP server: this machine is offline)."""
import http.server
import io
import shutil
import tarfile
import threading
from pathlib import Path

import pytest

from suites.data import suite_dir
from suites.registry import SuiteError, load_suite
from tests.suite_fixtures import write_kernelbench, write_rocm, write_tritonbench


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_EVOLVE_DATA", raising=False)
    monkeypatch.setenv("TRITON_EVOLVE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_order_path_then_environment(no_env, monkeypatch):
    a, b = no_env / "a", no_env / "b"
    write_tritonbench(a), write_tritonbench(b)
    monkeypatch.setenv("TRITON_EVOLVE_DATA", str(b))
    assert suite_dir("tritonbench", str(a)) == a / "tritonbench"
    assert suite_dir("tritonbench", str(a / "tritonbench")) == a / "tritonbench"
    assert suite_dir("tritonbench") == b / "tritonbench"
    monkeypatch.setenv("TRITON_EVOLVE_DATA", str(no_env / "empty"))
    with pytest.raises(SuiteError, match="TRITON_EVOLVE_DATA=.*no tritonbench data"):
        suite_dir("tritonbench")


def _upstream_tarball(tmp: Path, repo_dir: str, layout: dict[str, Path]) -> bytes:
    """A GitHub-style tarball: one top folder, the suites somewhere below it, names upstream's."""
    top = tmp / "stage" / repo_dir
    for dest, src in layout.items():
        shutil.copytree(src, top / dest) if src.is_dir() else (top / dest).parent.mkdir(parents=True, exist_ok=True)
        if not src.is_dir():
            shutil.copy2(src, top / dest)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        t.add(top, arcname=repo_dir)
    return buf.getvalue()


@pytest.fixture
def server():
    files: dict[str, bytes] = {}
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"not found")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", files, hits
    httpd.shutdown()


def test_download_fills_the_cache_once(no_env, monkeypatch, server):
    base, files, hits = server
    src = no_env / "src"
    tb, rocm, kb = write_tritonbench(src), write_rocm(src), write_kernelbench(src)
    data = "geak_eval/data"
    files["/AMD-AIG-AIMA/GEAK-eval/tar.gz/5761d21"] = _upstream_tarball(no_env, "GEAK-eval-5761d21", {
        f"{data}/TritonBench/data/TritonBench_G_v1": tb / "kernels",
        f"{data}/TritonBench/performance_metrics/perf_G": tb / "perf",
        f"{data}/TritonBench/data/TritonBench_G_comp_alpac_v1_fixed.json": tb / "instructions.json",
        f"{data}/ROCm/data/ROCm_v1": rocm / "kernels",
        f"{data}/ROCm/data/ROCm_eval_complex_instruct_v1.json": rocm / "instructions.json",
    })
    files["/ScalingIntelligence/KernelBench/tar.gz/423217d"] = _upstream_tarball(
        no_env, "KernelBench-423217d", {"KernelBench": kb})
    monkeypatch.setenv("TRITON_EVOLVE_DOWNLOAD_BASE", base)
    assert sorted(load_suite("tritonbench")) == ["broken_perf", "scale_add", "weak_scale_add"]
    assert sorted(load_suite("rocm")) == ["double"]
    assert len(load_suite("kernelbench")) == 3
    assert len(hits) == 3
    assert sorted(load_suite("tritonbench")) == ["broken_perf", "scale_add", "weak_scale_add"]
    assert len(hits) == 3  # the second load reads the cache
    assert (no_env / "cache" / "data" / "tritonbench" / "perf" / "scale_add_perf.py").exists()


def test_offline_without_data_says_what_to_set(no_env, monkeypatch, server):
    base, files, hits = server
    monkeypatch.setenv("TRITON_EVOLVE_DOWNLOAD_BASE", base)  # serves nothing: a 404
    with pytest.raises(SuiteError, match="give --suite-path DIR or set TRITON_EVOLVE_DATA"):
        load_suite("kernelbench")
    monkeypatch.setenv("TRITON_EVOLVE_DOWNLOAD_BASE", "http://127.0.0.1:9")  # nothing listens
    with pytest.raises(SuiteError, match="downloading .* failed"):
        load_suite("tritonbench")
    assert not (no_env / "cache" / "data" / "tritonbench").exists()  # nothing half-written left behind


def test_imports_below_the_separator_that_the_kernel_part_needs_are_hoisted_into_it(tmp_path):
    """In the suite's file the test part's imports ran before any call; the kernel part alone
    (what the timing loads) must still find them, and only those it uses."""
    from suites.data import SEPARATOR
    from suites.script import split_kernel_file
    f = tmp_path / "k.py"
    f.write_text("import triton\n\ndef run(n):\n    return torch.zeros(n), math.pi\n" + SEPARATOR +
                 "\nimport torch\nimport math\nimport numpy as np\nfrom .helpers import x\n\ndef test_run():\n"
                 "    return run(3)\n")
    module, test = split_kernel_file(f)
    ns: dict = {}
    exec(compile(module, "k", "exec"), ns)
    out, pi = ns["run"](3)
    assert out.shape == (3,) and pi > 3
    assert "numpy" not in module and "helpers" not in module and "import torch" in test
