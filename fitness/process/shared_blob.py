"""Large tensors between processes as sealed memory files, handed over as file descriptors.

Why: on a GPU machine every function-task comparison sent a case's outputs from the candidate's
child to the engine and on to a reference child (fitness.engine.reference_service): H100 builtin,
21.7 MiB per comparison, both trips through the engine's one process, which then spent ~0.6 CPU
s per candidate and ran at about one core. A memory file (memfd) sealed against writing,
shrinking and growing holds the bytes once; the engine passes the descriptor on without reading
them.

Trust: the receiver checks the seals before it maps a descriptor: a sender (a candidate's child)
can neither change the bytes after sending nor shrink the file under the receiver's mapping.
The receiver maps it private, so writing to a received tensor copies the page, never the file.
"""
from __future__ import annotations

import array
import fcntl
import mmap
import os
import socket

import torch

# a tensor at least this large travels as a memory file (smaller ones cost more in system calls
# than in copying)
SHARED_MIN_BYTES = 1 << 20
MAX_FDS = 64  # descriptors one message may carry; further tensors travel inline
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


class BadBlob(Exception):
    """A descriptor that is not a sealed memory file of the size it claims."""


class SharedBlob:
    """One sealed memory file (its descriptor is closed when the blob is dropped)."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass

    @staticmethod
    def of(raw: torch.Tensor) -> SharedBlob:
        """A new sealed file holding the bytes of `raw` (any tensor on any device; its size is
        counted in bytes, whatever the dtype and shape)."""
        flat = raw.contiguous().reshape(-1).view(torch.uint8)
        data = (flat.cpu() if flat.device.type != "cpu" else flat).numpy().data
        fd = os.memfd_create("te-tensor", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            # written, not mapped: 20 MiB took 6.4 ms written, 14.6 ms through a mapping (its page
            # faults), 17.4 ms through the socket (this project's CPU machine)
            done = 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], done)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        return SharedBlob(fd, len(data))

    def mapped(self) -> mmap.mmap:
        """A private, writable mapping of the file (writes copy the page, never reach the file),
        after checking the seals and the size: BadBlob where they are not what was sent."""
        try:
            seals = fcntl.fcntl(self.fd, fcntl.F_GET_SEALS)
            size = os.fstat(self.fd).st_size
        except OSError as e:
            raise BadBlob(f"a descriptor that is not a memory file ({e.strerror})") from None
        if seals & _SEALS != _SEALS:
            raise BadBlob("a memory file that is not sealed against writing and resizing")
        if size < self.size or self.size <= 0:
            raise BadBlob(f"a memory file of {size} bytes said to hold {self.size}")
        return mmap.mmap(self.fd, self.size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def is_unix_socket(fd: int) -> bool:
    try:
        s = socket.socket(fileno=fd)
    except OSError:  # a pipe (tests) or a file
        return False
    try:
        return s.family == socket.AF_UNIX
    finally:
        s.detach()


def send_with_fds(fd: int, data: bytes, fds: list[int]) -> int:
    """Sends a prefix of `data` with `fds` attached to its first byte; the bytes sent."""
    s = socket.socket(fileno=fd)
    try:
        return s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    finally:
        s.detach()


def recv_with_fds(fd: int, n: int) -> tuple[bytes, list[int]]:
    """Up to `n` bytes and the descriptors that came with them (none from a pipe)."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return os.read(fd, n), []
    try:
        data, fds, flags, _ = socket.recv_fds(s, n, MAX_FDS)
    finally:
        s.detach()
    if flags & socket.MSG_CTRUNC:
        for k in fds:
            os.close(k)
        raise BadBlob(f"a message with more than {MAX_FDS} descriptors")
    return data, list(fds)
