"""What a freshly forked child does before it runs anything of a candidate's.

The zygote (fitness.process.zygote) sits inside the sandbox (bubblewrap: read-only filesystem, no
network); each child then takes, where the kernel allows unprivileged namespaces:
- its own user and mount namespaces (not a PID namespace: CUDA does not start in one), its own
  session, and a cap on processes, so a fork bomb stays small and dies with its process group;
- a fresh tmpfs as its only writable folder (TMPDIR, the Triton cache, HOME), with the
  zygote's /tmp and the shared Triton cache remounted read-only (a candidate child reads it
  through fitness.candidate.cachelayer): nothing one candidate writes is seen by another, or by a later
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

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWIPC = 0x00020000, 0x10000000, 0x08000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
MAX_FILE_BYTES = 256 << 20
MAX_OPEN_FILES = 1024
CANDIDATE_NICE = 10  # added to a candidate child's niceness (fitness.process.isolation.set_limits)
PRIVATE_MOUNT = "/tmp/te-private"  # made by the zygote; each child mounts its own tmpfs there
SHM = "/dev/shm"
# set by the user (or a test) for the engine: children behave as on a machine that refuses
# unprivileged namespaces (CI), to exercise that fallback; a candidate cannot set the zygote's
NO_NAMESPACES = "TE_NO_CHILD_NAMESPACES"
SHM_SIZE = "512m"  # a private /dev/shm's cap: tmpfs pages are not in the RSS the watchdog reads
# kernel filesystems: writes there are checked against the initial namespace, not the mount
# flags; /dev holds device nodes the GPU needs open for writing (its shm replaced below)
UNSEALED = ("/proc", "/sys", "/dev")

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


def _locked_flags(path: str) -> int:
    """The flags a more privileged namespace locked on the mount at `path` (bubblewrap mounts its
    /tmp nosuid,nodev: a remount that drops them is refused)."""
    keep = 0
    flags = os.statvfs(path).f_flag
    for st, ms in ((os.ST_NOSUID, 2), (os.ST_NODEV, 4), (os.ST_NOEXEC, 8), (os.ST_NOATIME, 1024),
                   (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21)):
        if flags & st:
            keep |= ms
    return keep


def _remount_read_only(path: str) -> None:
    """Bind `path` onto itself read-only, keeping its locked flags."""
    keep = _locked_flags(path)
    _mount(path, path, None, MS_BIND | MS_REC)
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def writable_mounts() -> list[str]:
    """Mount points this process sees writable, outside the kernel's own filesystems; a mount
    hidden under another on the same point is unreachable and left out."""
    mounts = []  # (id, parent id, point, writable)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # octal escapes: \040 is a space
            mounts.append((fields[0], fields[1], point, "rw" in fields[5].split(",")))
    hidden = {parent for _, parent, point, _ in mounts for mid, _, other, _ in mounts
              if mid == parent and other == point}
    found = {point for mid, _, point, rw in mounts if rw and mid not in hidden
             and not any(point == u or point.startswith(u + "/") for u in UNSEALED)}
    return sorted(found, key=len)


def seal() -> list[str]:
    """Every writable mount read-only (a candidate child: nothing it writes outside its private
    tmpfs can be read by a clean process, or by the next candidate); the mounts left writable.
    Those are named in the child's description (every verdict carries it), not fatal: on the H100
    machine every candidate's child died at its start when one mount could not be sealed, and
    there bubblewrap had already bound the host's filesystem read-only."""
    for point in writable_mounts():
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(point))
        except OSError:
            pass  # named below, with whatever else is still writable
    return writable_mounts()


def enter_namespaces(read_only: tuple[str, ...], sealed: bool = False) -> tuple[str, list[str]]:
    """New user, mount and IPC namespaces, a private tmpfs and a private /dev/shm, `read_only`
    remounted read-only (with `sealed`: every other writable mount as well). Raises OSError when
    the kernel refuses. No PID namespace: CUDA fails to start in one (error 304, seen on the H100
    with and without bubblewrap, bench/ns_probe.py), and a process that unshares one cannot start
    threads (fitness.process.reaper finds a candidate's processes instead)."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    for path in read_only:
        if os.path.isdir(path):
            _remount_read_only(path)
    unsealed = seal() if sealed else []
    _mount("tmpfs", PRIVATE_MOUNT, "tmpfs", 0, "size=2g,mode=700")
    if os.path.isdir(SHM):  # after the seal: this one stays writable, and is this child's alone
        _mount("tmpfs", SHM, "tmpfs", 2 | 4, f"size={SHM_SIZE},mode=1777")  # nosuid, nodev
    return PRIVATE_MOUNT, unsealed


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
    """How this process is confined (it goes into the verdict). `keep_cache`: a clean child
    (no candidate's code), which keeps the clean Triton cache writable; a candidate's child has
    every other mount sealed read-only."""
    try:
        if os.environ.get(NO_NAMESPACES) == "1":
            raise OSError(0, f"{NO_NAMESPACES}=1 in the engine's environment")
        root, unsealed = enter_namespaces(read_only, sealed=not keep_cache)
        sealed = "every other mount read-only" + (
            f" but {', '.join(unsealed[:4])} (could not be remounted)" if unsealed else "")
        how = "own user, mount and IPC namespaces; private tmpfs and /dev/shm; " + \
            ("shared folders read-only" if keep_cache else sealed)
    except OSError as e:
        root = tempfile.mkdtemp(prefix="te-child-")
        how = (f"a private folder only (namespaces refused: {e}); /dev/shm and /tmp its sandbox's: "
               "files it leaves in /dev/shm fail it, and are removed only where provably its own; "
               "its processes found by ancestry only")
    private_env(root, keep_cache)
    return how
