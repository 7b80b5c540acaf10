"""Where a data-backed suite's files come from.

In order: `--suite-path DIR` (the suite's own folder, or a folder holding it); the environment
variable TRITON_EVOLVE_DATA (a folder holding tritonbench/, rocm/, kernelbench/); a per-user cache
folder, filled on first use by downloading the public repositories at pinned commits. The data is
never copied into the project.
"""
from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from suites.registry import SuiteError

SEPARATOR = "#" * 146


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    marker: str  # a path inside a ready suite folder: what tells it apart from a wrong folder


SOURCES = {
    "tritonbench": Source("AMD-AIG-AIMA/GEAK-eval", "5761d21", "instructions.json"),
    "rocm": Source("AMD-AIG-AIMA/GEAK-eval", "5761d21", "instructions.json"),
    "kernelbench": Source("ScalingIntelligence/KernelBench", "423217d", "level1"),
}
DOWNLOAD_BASE = "https://codeload.github.com"  # {base}/{repo}/tar.gz/{commit}
TIMEOUT_S = 60


def project_cache() -> Path:
    """triton-evolve's cache folder (suite data, Triton caches): TRITON_EVOLVE_CACHE, else the
    XDG cache home's triton-evolve. The one root every part of the project uses."""
    return Path(os.environ.get("TRITON_EVOLVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "triton-evolve"))


def cache_root() -> Path:
    return project_cache() / "data"


def suite_dir(suite: str, path: str | None = None) -> Path:
    """The folder holding `suite`'s data, downloading it into the cache if it is nowhere else."""
    src = SOURCES[suite]
    if path:
        p = Path(path).expanduser()
        for cand in (p, p / suite):
            if (cand / src.marker).exists():
                return cand
        raise SuiteError(f"--suite-path {path}: no {suite} data there (expected {src.marker} in it or in "
                         f"{p / suite})")
    env = os.environ.get("TRITON_EVOLVE_DATA")
    if env:
        p = Path(env).expanduser() / suite
        if not (p / src.marker).exists():
            raise SuiteError(f"TRITON_EVOLVE_DATA={env}: no {suite} data in {p} (expected {src.marker})")
        return p
    p = cache_root() / suite
    if not (p / src.marker).exists():
        download(suite, p)
    return p


def local_suites() -> list[str]:
    """The data-backed suites whose data is on this machine (environment or cache): no download."""
    env = os.environ.get("TRITON_EVOLVE_DATA")
    found = []
    for suite, src in SOURCES.items():
        places = ([Path(env).expanduser() / suite] if env else []) + [cache_root() / suite]
        if any((p / src.marker).exists() for p in places):
            found.append(suite)
    return found


def download(suite: str, dest: Path) -> None:
    src = SOURCES[suite]
    base = os.environ.get("TRITON_EVOLVE_DOWNLOAD_BASE", DOWNLOAD_BASE).rstrip("/")
    url = f"{base}/{src.repo}/tar.gz/{src.commit}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        archive = Path(tmp) / "src.tar.gz"
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r, open(archive, "wb") as f:
                shutil.copyfileobj(r, f)
        except (urllib.error.URLError, OSError) as e:
            raise SuiteError(f"no {suite} data here and downloading {url} failed ({e}): give --suite-path DIR or "
                             f"set TRITON_EVOLVE_DATA to a folder holding {suite}/ (see README)") from None
        try:
            with tarfile.open(archive) as t:
                t.extractall(Path(tmp) / "x", filter="data")
        except (tarfile.TarError, OSError) as e:
            raise SuiteError(f"the download from {url} is not a readable tar.gz archive: {e}") from None
        staged = Path(tmp) / "suite"
        _ARRANGE[suite](Path(tmp) / "x", staged)
        os.replace(staged, dest)  # atomic: a half-arranged folder is never mistaken for data


def _py_with_separator(root: Path) -> dict[Path, list[Path]]:
    """Folders by the kernel files (146-# separator) they hold."""
    found: dict[Path, list[Path]] = {}
    for f in root.rglob("*.py"):
        try:
            # 146 '#' in TritonBench, 146 to 149 in the ROCm set
            lines = f.read_text(errors="replace").splitlines()
            if any(len(ln.strip()) >= 140 and set(ln.strip()) == {"#"} for ln in lines):
                found.setdefault(f.parent, []).append(f)
        except OSError:
            continue
    return found


def _json_with(root: Path, key: str) -> Path:
    """The JSON file whose records carry `key` (upstream names these files differently over time)."""
    best = None
    for f in sorted(root.rglob("*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, list) and data and isinstance(data[0], dict) and key in data[0]:
            if best is None or len(data) > best[0]:
                best = (len(data), f)
    if best is None:
        raise SuiteError(f"the downloaded archive has no instruction file with {key!r} records")
    return best[1]


def _arrange_geak(root: Path, out: Path, key: str, want_perf: bool) -> None:
    folders = _py_with_separator(root)
    records = json.loads(_json_with(root, key).read_text())
    names = {r["file"] for r in records}
    # the kernel folder is the one holding the instruction file's kernels
    kdir = max(folders, key=lambda d: len(names & {f.name for f in folders[d]}), default=None)
    if kdir is None or not names & {f.name for f in folders[kdir]}:
        raise SuiteError("the downloaded archive has no kernel folder matching its instruction file")
    (out / "kernels").mkdir(parents=True)
    for f in folders[kdir]:
        shutil.copy2(f, out / "kernels" / f.name)
    (out / "instructions.json").write_text(json.dumps(records, indent=1))
    if want_perf:
        perf = [f for f in root.rglob("*_perf.py")]
        pdir = max({f.parent for f in perf}, key=lambda d: len(list(d.glob("*_perf.py"))), default=None)
        if pdir is None:
            raise SuiteError("the downloaded archive has no perf folder")
        shutil.copytree(pdir, out / "perf")
    for lic in ("LICENSE", "LICENSE-NOTICES.txt"):
        hits = sorted(root.glob(f"*/{lic}"))
        if hits:
            shutil.copy2(hits[0], out / lic)


def _arrange_tritonbench(root: Path, out: Path) -> None:
    _arrange_geak(root, out, "difficulty", want_perf=True)


def _arrange_rocm(root: Path, out: Path) -> None:
    _arrange_geak(root, out, "target_kernel_name", want_perf=False)


def _arrange_kernelbench(root: Path, out: Path) -> None:
    levels = {d.name: d for d in root.rglob("level[123]") if d.is_dir() and any(d.glob("*.py"))}
    if set(levels) != {"level1", "level2", "level3"}:
        raise SuiteError(f"the downloaded archive has KernelBench levels {sorted(levels)}, expected level1-3")
    out.mkdir(parents=True)
    for name, d in levels.items():
        shutil.copytree(d, out / name)
    hits = sorted(root.glob("*/LICENSE"))
    if hits:
        shutil.copy2(hits[0], out / "LICENSE")


_ARRANGE = {"tritonbench": _arrange_tritonbench, "rocm": _arrange_rocm, "kernelbench": _arrange_kernelbench}
