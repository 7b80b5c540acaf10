"""A candidate child's Triton cache: its own private folder, over the shared cache read-only.

Every fresh child with an empty cache compiled Triton's driver module and each kernel's launcher
with the C compiler again (on the H100 machine the first launch in a fresh child took ~0.8 s
against ~20 ms in a warm worker). The shared cache is written only by the clean children (the
baseline and the timing replays, which run no candidate's host code), and Triton names every
entry by the hash of what it was built from, so a candidate child may read it: it finds the
launchers and the suite's kernels built there, and whatever it builds itself stays in its
private folder, gone with it.

Installed in candidate children through TRITON_CACHE_MANAGER (fitness.engine.sandbox.worker_env).
"""
from __future__ import annotations

import os

from triton.runtime.cache import FileCacheManager

SHARED_ENV = "TE_SHARED_TRITON_CACHE"


class ReadThroughCache(FileCacheManager):
    def __init__(self, key: str, override: bool = False, dump: bool = False):
        super().__init__(key, override, dump)
        shared = os.environ.get(SHARED_ENV, "")
        self.shared_dir = os.path.join(shared, key) if shared and not (override or dump) else ""
        self._writing = False

    def _make_path(self, filename: str) -> str:
        mine = super()._make_path(filename)
        if self._writing or not self.shared_dir or os.path.exists(mine):
            return mine
        theirs = os.path.join(self.shared_dir, filename)
        return theirs if os.path.exists(theirs) else mine

    def put(self, data: str | bytes, filename: str, binary: bool = True) -> str:
        self._writing = True  # always into the private folder: the shared one is read-only here
        try:
            return super().put(data, filename, binary)
        finally:
            self._writing = False
