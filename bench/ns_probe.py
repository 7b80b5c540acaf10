"""Which confinement steps leave CUDA usable in a forked child (a probe for the GPU machine)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
import torch  # noqa: E402

from fitness.process import isolation as iso  # noqa: E402

os.makedirs(iso.PRIVATE_MOUNT, exist_ok=True)


def attempt(name, steps):
    pid = os.fork()
    if pid == 0:
        try:
            for s in steps:
                s()
            if "pid" in name:
                p2 = os.fork()
                if p2:
                    _, st = os.waitpid(p2, 0)
                    os._exit(os.waitstatus_to_exitcode(st))
            x = torch.ones(4, device="cuda")
            print(name, "OK", float(x.sum()), flush=True)
            os._exit(0)
        except BaseException as e:  # noqa: BLE001
            print(name, "FAILED", repr(e)[:300], flush=True)
            os._exit(1)
    os.waitpid(pid, 0)


def user():
    uid, gid = os.getuid(), os.getgid()
    iso._check(iso._libc.unshare(iso.CLONE_NEWUSER), "unshare user")
    iso._write("/proc/self/setgroups", "deny")
    iso._write("/proc/self/uid_map", f"{uid} {uid} 1")
    iso._write("/proc/self/gid_map", f"{gid} {gid} 1")


def userns_mnt():
    uid, gid = os.getuid(), os.getgid()
    iso._check(iso._libc.unshare(iso.CLONE_NEWUSER | iso.CLONE_NEWNS), "unshare")
    iso._write("/proc/self/setgroups", "deny")
    iso._write("/proc/self/uid_map", f"{uid} {uid} 1")
    iso._write("/proc/self/gid_map", f"{gid} {gid} 1")
    iso._mount("none", "/", None, iso.MS_REC | iso.MS_PRIVATE)


def mnt_only():
    iso._check(iso._libc.unshare(iso.CLONE_NEWNS), "unshare mnt")
    iso._mount("none", "/", None, iso.MS_REC | iso.MS_PRIVATE)


def ro_tmp():
    iso._remount_read_only("/tmp")


def tmpfs():
    iso._mount("tmpfs", iso.PRIVATE_MOUNT, "tmpfs", 0, "size=2g,mode=700")


def pidns():
    iso._check(iso._libc.unshare(iso.CLONE_NEWPID), "unshare pid")


attempt("plain", [])
attempt("user", [user])
attempt("mnt-only", [mnt_only])
attempt("mnt-only+ro+tmpfs", [mnt_only, ro_tmp, tmpfs])
attempt("mnt-only+ro+tmpfs+pid", [mnt_only, ro_tmp, tmpfs, pidns])
attempt("user+mnt", [userns_mnt])
attempt("user+mnt+ro+tmpfs", [userns_mnt, ro_tmp, tmpfs])
attempt("user+mnt+pid", [userns_mnt, pidns])
