import os
import subprocess
import sys

import pytest

from fitness.engine.sandbox import MAX_CONNECTIONS, _needed_paths, detect, worker_env
from tests.conftest import ROOT


def test_disabled_sandbox_says_so():
    sb = detect(disabled=True)
    assert not sb.isolated and "disabled" in sb.description


def test_python_and_checkout_are_kept_visible():
    assert sys.prefix in _needed_paths()


def test_workers_find_the_project_from_any_folder():
    """fitness/engine/ is two folders below the project: the zygote's path and folder are the project's
    (after the move into folders it was fitness/: in a project under /tmp, which the sandbox hides but
    for the paths it binds, `triton-evolve check` failed with no module 'suites')."""
    root = ROOT.resolve()
    assert (root / "run.py").is_file() and (root / "suites").is_dir()
    assert worker_env(True, 1 << 30)["PYTHONPATH"].split(os.pathsep)[0] == str(root)
    assert str(root) in _needed_paths()


@pytest.mark.skipif(not detect().isolated, reason=detect().description)
def test_sandboxed_python_imports_the_project_and_has_no_network():
    sb = detect()
    ok = subprocess.run(sb.wrap([sys.executable, "-c", "import torch, fitness.process.child"]), capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    probe = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 22), 2)\nexcept OSError as e:\n" \
            "    print('refused', e)\n"
    out = subprocess.run(sb.wrap([sys.executable, "-c", probe]), capture_output=True, text=True, timeout=60)
    assert "refused" in out.stdout
    tmp = subprocess.run(sb.wrap(["sh", "-c", "touch /etc/te-probe"]), capture_output=True, text=True, timeout=60)
    assert tmp.returncode != 0  # the filesystem is read-only


@pytest.mark.skipif(not detect().isolated, reason=detect().description)
def test_only_a_clean_sandbox_may_write_the_clean_triton_cache():
    sb = detect()
    probe = os.path.join(sb.clean_cache, f"te-probe-{os.getpid()}")
    try:
        touch = ["sh", "-c", f"touch {probe}"]
        assert subprocess.run(sb.wrap(touch), capture_output=True, timeout=60).returncode != 0
        assert not os.path.exists(probe)
        assert subprocess.run(sb.wrap(touch, clean=True), capture_output=True, timeout=60).returncode == 0
        assert os.path.exists(probe)
    finally:
        if os.path.exists(probe):
            os.remove(probe)


def test_every_child_starts_cuda_with_one_work_queue_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv(MAX_CONNECTIONS, raising=False)
    for clean in (False, True):
        assert worker_env(False, 0, clean=clean)[MAX_CONNECTIONS] == "1"
    monkeypatch.setenv(MAX_CONNECTIONS, "8")
    assert worker_env(False, 0)[MAX_CONNECTIONS] == "8"
