"""fitness/process/shared_blob.py: sealed memory files, their checks, and descriptors over a Unix socket.
(The messages built on them are tests/test_protocol.py's.)"""
import array
import errno
import fcntl
import mmap
import os
import socket

import pytest
import torch

from fitness.process.shared_blob import (
    MAX_FDS,
    BadBlob,
    SharedBlob,
    is_unix_socket,
    recv_with_fds,
    send_with_fds,
)

ALL_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def raw(n: int) -> torch.Tensor:
    return (torch.arange(n) % 251).to(torch.uint8)


def memfile(n: int, seals: int = 0) -> int:
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, n)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def test_a_blob_holds_exactly_the_bytes_of_its_tensor():
    t = raw(3 * (1 << 20) + 17)  # larger than one write may take at once on some kernels
    blob = SharedBlob.of(t)
    assert blob.size == t.numel() == os.fstat(blob.fd).st_size
    assert os.pread(blob.fd, blob.size, 0) == t.numpy().tobytes()


def test_a_blob_sealed_for_reading_cannot_be_written_by_its_receiver():
    blob = SharedBlob.of(raw(4096))
    seals = fcntl.fcntl(blob.fd, fcntl.F_GET_SEALS)
    assert seals & ALL_SEALS == ALL_SEALS and seals & fcntl.F_SEAL_SEAL  # and no seal can be taken off or added
    with pytest.raises(PermissionError):
        os.pwrite(blob.fd, b"x", 0)
    for size in (10, 8192):  # neither shrunk under a mapping nor grown
        with pytest.raises(PermissionError):
            os.ftruncate(blob.fd, size)
    with pytest.raises(PermissionError):
        mmap.mmap(blob.fd, blob.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE)
    with pytest.raises(PermissionError):
        fcntl.fcntl(blob.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
    assert os.pread(blob.fd, 4, 0) == bytes([0, 1, 2, 3])


def test_a_blob_is_closed_with_its_process_image_on_exec():
    blob = SharedBlob.of(raw(16))
    assert fcntl.fcntl(blob.fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC


def test_writing_through_the_mapping_changes_only_the_receivers_pages():
    blob = SharedBlob.of(raw(8192))
    with blob.mapped() as mm:
        assert len(mm) == 8192 and mm[:3] == bytes([0, 1, 2])
        mm[:3] = b"zzz"
        assert mm[:3] == b"zzz"
    assert os.pread(blob.fd, 3, 0) == bytes([0, 1, 2])
    with blob.mapped() as again:  # a fresh mapping sees the file, not the earlier private copy
        assert again[:3] == bytes([0, 1, 2])


def test_a_file_larger_than_it_is_said_to_be_maps_only_the_size_said():
    fd = memfile(8192, ALL_SEALS)
    with SharedBlob(fd, 100).mapped() as mm:
        assert len(mm) == 100


@pytest.mark.parametrize("seals", [0, fcntl.F_SEAL_WRITE, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK,
                                   fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW],
                         ids=["none", "write only", "no grow seal", "no write seal"])
def test_a_memory_file_missing_any_one_seal_is_refused(seals):
    blob = SharedBlob(memfile(4096, seals), 4096)
    with pytest.raises(BadBlob, match="not sealed against writing and resizing"):
        blob.mapped()


@pytest.mark.parametrize("claimed", [0, -1, 4097])
def test_a_size_that_is_not_the_files_is_refused(claimed):
    blob = SharedBlob(memfile(4096, ALL_SEALS), claimed)
    with pytest.raises(BadBlob, match=f"of 4096 bytes said to hold {claimed}"):
        blob.mapped()


def test_an_empty_tensor_makes_a_blob_that_cannot_be_mapped():
    blob = SharedBlob.of(raw(0))
    assert blob.size == 0
    with pytest.raises(BadBlob, match="said to hold 0"):
        blob.mapped()


@pytest.mark.parametrize("what", ["pipe", "regular file", "closed descriptor"])
def test_a_descriptor_that_is_no_memory_file_is_refused_as_such(what, tmp_path):
    if what == "pipe":
        fd, w = os.pipe()
        os.close(w)
    elif what == "regular file":
        (tmp_path / "f").write_bytes(b"x" * 4096)
        fd = os.open(tmp_path / "f", os.O_RDONLY)
    else:
        fd = memfile(4096, ALL_SEALS)
        os.close(fd)
    blob = SharedBlob(fd, 4096)
    with pytest.raises(BadBlob, match="a descriptor that is not a memory file"):
        blob.mapped()


def test_dropping_a_blob_closes_its_descriptor():
    blob = SharedBlob.of(raw(64))
    fd = blob.fd
    del blob
    with pytest.raises(OSError) as e:
        os.fstat(fd)
    assert e.value.errno == errno.EBADF


def test_dropping_a_blob_whose_descriptor_is_already_closed_is_quiet():
    fd = memfile(64)
    os.close(fd)
    blob = SharedBlob(fd, 64)
    blob.__del__()  # would raise OSError, were it not swallowed


def test_only_a_unix_socket_counts_as_one_and_the_check_leaves_the_descriptor_open(tmp_path):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    seq, _seq = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    r, w = os.pipe()
    f = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR)
    try:
        assert is_unix_socket(a.fileno()) and is_unix_socket(seq.fileno())
        assert not is_unix_socket(tcp.fileno())
        assert not is_unix_socket(r) and not is_unix_socket(f)
        for fd in (a.fileno(), seq.fileno(), tcp.fileno(), r, f):
            os.fstat(fd)  # still open
    finally:
        for s in (a, b, seq, _seq, tcp):
            s.close()
        for fd in (r, w, f):
            os.close(fd)


def test_descriptors_sent_over_a_socket_arrive_as_new_descriptors_of_the_same_files():
    blobs = [SharedBlob.of(raw(n)) for n in (10, 20, 30)]
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        sent = send_with_fds(a.fileno(), b"hello", [x.fd for x in blobs])
        data, fds = recv_with_fds(b.fileno(), 100)
        a.sendall(b"after")  # both sockets still usable: the helpers only borrowed them
        assert b.recv(10) == b"after"
    got = [SharedBlob(fd, n) for fd, n in zip(fds, (10, 20, 30))]
    assert sent == 5 and data == b"hello" and len(got) == 3
    for mine, theirs in zip(blobs, got):
        assert theirs.fd != mine.fd
        assert os.fstat(theirs.fd).st_ino == os.fstat(mine.fd).st_ino
        with theirs.mapped() as mm:
            assert bytes(mm) == bytes(range(theirs.size))


def test_reading_from_a_pipe_gives_the_bytes_and_no_descriptors():
    r, w = os.pipe()
    try:
        os.write(w, b"abcdef")
        assert recv_with_fds(r, 4) == (b"abcd", [])
        assert recv_with_fds(r, 100) == (b"ef", [])
    finally:
        os.close(r)
        os.close(w)


def test_a_message_with_max_fds_descriptors_is_taken_whole():
    blob = SharedBlob.of(raw(8))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        send_with_fds(a.fileno(), b"x", [blob.fd] * MAX_FDS)
        _, fds = recv_with_fds(b.fileno(), 1)
    assert len(fds) == MAX_FDS
    for fd in fds:
        os.close(fd)


def test_a_message_with_more_descriptors_than_allowed_is_refused_and_none_of_them_stays_open():
    blob = SharedBlob.of(raw(8))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        before = open_fds()
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [blob.fd] * (MAX_FDS + 1)))])
        with pytest.raises(BadBlob, match=f"more than {MAX_FDS} descriptors"):
            recv_with_fds(b.fileno(), 1)
        assert open_fds() == before


@pytest.mark.gpu
def test_a_blob_of_a_tensor_on_the_gpu_holds_its_bytes():
    t = raw(5000).cuda()
    blob = SharedBlob.of(t)
    assert blob.size == 5000 and os.pread(blob.fd, 5000, 0) == t.cpu().numpy().tobytes()


def test_a_blob_counts_its_size_in_bytes_whatever_the_tensors_dtype_and_shape():
    for t in (torch.arange(4, dtype=torch.float32), torch.zeros(3, 5, dtype=torch.uint8)):
        blob = SharedBlob.of(t)
        assert blob.size == t.numel() * t.element_size() == os.fstat(blob.fd).st_size
        assert bytes(blob.mapped()) == t.contiguous().numpy().tobytes()
