"""What a freshly forked child does before it runs anything of a candidate's.

The zygote (fitness.zygote) sits inside the sandbox (bubblewrap: read-only filesystem, no
network); each child then takes, where the kernel allows unprivileged namespaces:
- its own user, mount and PID namespaces: the candidate's process is PID 1 of a namespace, so
  killing it kills every process it forked (a fork bomb included);
- a fresh tmpfs as its only writable folder (TMPDIR, the Triton cache, HOME), with the
  zygote's /tmp and the shared Triton cache remounted read-only: nothing one candidate writes
  is seen by another, or by a later run;
- resource limits: open files, file size (a flood of output fails instead of filling a disk),
  no core dumps.
Where namespaces are not available the child still gets a private folder and the limits, and
its description (which goes into every verdict) says so.
"""
from __future__ import annotations

import ctypes
import os
import resource
import tempfile

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
MAX_FILE_BYTES = 256 << 20
MAX_OPEN_FILES = 1024
PRIVATE_MOUNT = "/tmp/te-private"  # made by the zygote; each child mounts its own tmpfs there

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str):
    if rc != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _mount(src, target, fstype, flags, data=None):
    _check(_libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), flags,
                       data and data.encode()), f"mount {target}")


def _write(path: str, text: str):
    with open(path, "w") as f:
        f.write(text)


def enter_namespaces(read_only: tuple[str, ...]) -> str:
    """New user + mount + PID namespaces, a private tmpfs, `read_only` remounted read-only.
    Raises OSError when the kernel refuses; the caller falls back."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    for path in read_only:
        if os.path.isdir(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    _mount("tmpfs", PRIVATE_MOUNT, "tmpfs", 0, "size=2g,mode=700")
    return PRIVATE_MOUNT


def set_limits():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(MAX_OPEN_FILES, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (cap, hard))


def private_env(root: str):
    for sub in ("tmp", "triton", "home"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    os.environ.update(TMPDIR=os.path.join(root, "tmp"), TRITON_CACHE_DIR=os.path.join(root, "triton"),
                      TRITON_HOME=os.path.join(root, "home"), HOME=os.path.join(root, "home"))
    tempfile.tempdir = None
    os.chdir(root)


def confine(read_only: tuple[str, ...]) -> tuple[str, bool]:
    """(description, whether the caller must fork once more to enter the new PID namespace)."""
    try:
        root = enter_namespaces(read_only)
        how, forked = "own namespaces, private tmpfs, shared folders read-only", True
    except OSError as e:
        root = tempfile.mkdtemp(prefix="te-child-")
        how, forked = f"private folder only (namespaces refused: {e.strerror})", False
    private_env(root)
    return how, forked
