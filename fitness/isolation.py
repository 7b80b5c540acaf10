"""What a freshly forked child does before it runs anything of a candidate's.

The zygote (fitness.zygote) sits inside the sandbox (bubblewrap: read-only filesystem, no
network); each child then takes, where the kernel allows unprivileged namespaces:
- its own user and mount namespaces (not a PID namespace: CUDA does not start in one), its own
  session, and a cap on processes, so a fork bomb stays small and dies with its process group;
- a fresh tmpfs as its only writable folder (TMPDIR, the Triton cache, HOME), with the
  zygote's /tmp and the shared Triton cache remounted read-only (a candidate child reads it
  through fitness.cachelayer): nothing one candidate writes is seen by another, or by a later
  run. Clean children (the baseline, the timing replays: no candidate's host code) keep the
  shared cache writable, so launchers are built once;
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

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
MAX_FILE_BYTES = 256 << 20
MAX_OPEN_FILES = 1024
CANDIDATE_NICE = 10  # added to a candidate child's niceness (fitness.isolation.set_limits)
PRIVATE_MOUNT = "/tmp/te-private"  # made by the zygote; each child mounts its own tmpfs there

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), flags,
                       data and data.encode()), f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _remount_read_only(path: str) -> None:
    """Bind `path` onto itself read-only, keeping the flags a more privileged namespace locked
    on it (bubblewrap mounts its /tmp nosuid,nodev: a remount that drops them is refused)."""
    keep = 0
    flags = os.statvfs(path).f_flag
    for st, ms in ((os.ST_NOSUID, 2), (os.ST_NODEV, 4), (os.ST_NOEXEC, 8), (os.ST_NOATIME, 1024),
                   (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21)):
        if flags & st:
            keep |= ms
    _mount(path, path, None, MS_BIND | MS_REC)
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def enter_namespaces(read_only: tuple[str, ...]) -> str:
    """New user + mount namespaces, a private tmpfs, `read_only` remounted read-only. Raises
    OSError when the kernel refuses. No PID namespace: CUDA fails to start in one (error 304,
    seen on the H100 with and without bubblewrap, bench/ns_probe.py)."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    for path in read_only:
        if os.path.isdir(path):
            _remount_read_only(path)
    _mount("tmpfs", PRIVATE_MOUNT, "tmpfs", 0, "size=2g,mode=700")
    return PRIVATE_MOUNT


def set_limits(clean: bool = False) -> None:
    """`clean`: a timing child keeps the engine's priority; a candidate's child yields the CPU to
    it (H100 host, 16 cores: a trial's round trip took 3 ms under load against 0.3 ms alone)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not clean:
        os.nice(CANDIDATE_NICE)
    # processes of this user now, plus room for a candidate's threads (threads count too)
    running = sum(name.isdigit() for name in os.listdir("/proc"))
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    cap = running + 512 if hard == resource.RLIM_INFINITY else min(running + 512, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (cap, hard))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(MAX_OPEN_FILES, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (cap, hard))


def cap_address_space(limit_bytes: int) -> None:
    """This process's address space capped at what it maps now plus `limit_bytes`: breaks CUDA,
    so only on CPU; the engine watches RSS too."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + limit_bytes, hard))


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def outer_pid() -> int:
    """This process's pid as the engine sees it (in a PID namespace of its own it is 1 here)."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def private_env(root: str, keep_cache: bool = False) -> None:
    """Temporary files, HOME and (unless `keep_cache`: a clean child) the Triton cache in `root`."""
    for sub in ("tmp", "triton", "home"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    os.environ.update(TMPDIR=os.path.join(root, "tmp"), TRITON_HOME=os.path.join(root, "home"),
                      HOME=os.path.join(root, "home"))
    if not keep_cache:
        os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "triton")
    tempfile.tempdir = None
    os.chdir(root)


def confine(read_only: tuple[str, ...], keep_cache: bool = False) -> str:
    """How this process is confined (it goes into the verdict)."""
    try:
        root = enter_namespaces(read_only)
        how = "own user and mount namespaces; private tmpfs; shared folders read-only"
    except OSError as e:
        root = tempfile.mkdtemp(prefix="te-child-")
        how = f"a private folder only (namespaces refused: {e})"
    private_env(root, keep_cache)
    return how
