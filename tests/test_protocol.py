import array
import fcntl
import json
import os
import socket

import pytest
import torch

from fitness.process import protocol


def roundtrip(msg):
    r, w = os.pipe()
    try:
        protocol.send(w, msg)
        os.close(w)
        return protocol.recv(r)
    finally:
        os.close(r)


def test_roundtrip_keeps_values_dtypes_and_strides():
    base = torch.randn(8, 12)
    strided = base[:, ::3]
    msg = {"a": strided, "b": (torch.arange(5, dtype=torch.int8), torch.randn(3).to(torch.bfloat16)),
           "n": 3, "s": "x", "f": 1.5, "none": None}
    got = roundtrip(msg)
    assert torch.equal(got["a"], strided) and got["a"].stride() == strided.stride()
    assert got["b"][1].dtype == torch.bfloat16 and torch.equal(got["b"][1], msg["b"][1])
    assert isinstance(got["b"], tuple) and got["n"] == 3 and got["none"] is None


def test_no_pickle_objects_cross():
    with pytest.raises(protocol.ProtocolError):
        roundtrip({"obj": object()})


def test_payload_limit():
    r, w = os.pipe()
    protocol.send(w, {"t": torch.zeros(1000)})
    os.close(w)
    with pytest.raises(protocol.ProtocolError):
        protocol.recv(r, max_bytes=100)
    os.close(r)


def test_a_tensor_larger_than_the_pipe_and_the_read_chunk_arrives_whole_and_writable():
    import threading

    big = torch.randn(5 << 20)  # 20 MiB: more than one 16 MiB read, far more than a pipe holds
    r, w = os.pipe()
    sender = threading.Thread(target=lambda: (protocol.send(w, {"out": [big, torch.empty(0)]}), os.close(w)))
    sender.start()
    try:
        got = protocol.recv(r)["out"]
    finally:
        sender.join()
        os.close(r)
    assert torch.equal(got[0], big) and got[1].numel() == 0
    got[0].add_(1)  # the receiver owns its copy: the sender's tensor is untouched
    assert not torch.equal(got[0], big)


# -- large tensors as sealed memory files (fitness.process.shared_blob), over a Unix socket -------------
def socket_roundtrip(msg):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        protocol.send(a.fileno(), msg)
        return protocol.recv(b.fileno())


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_large_tensor_travels_as_a_sealed_file_and_is_handed_on_without_a_copy():
    base = torch.randn(1024, 1024)
    msg = {"outputs": [base[:, ::2], torch.arange(10)]}
    got = socket_roundtrip(msg)["outputs"]
    assert torch.equal(got[0], base[:, ::2]) and got[0].stride() == (1024, 2)
    assert torch.equal(got[1], torch.arange(10)) and not hasattr(got[1], "_te_blob")  # small: inline
    blob = got[0]._te_blob
    again = socket_roundtrip({"outputs": got})["outputs"]  # the engine handing it to another process
    assert torch.equal(again[0], base[:, ::2])
    assert os.fstat(again[0]._te_blob.fd).st_ino == os.fstat(blob.fd).st_ino  # the same file, not a copy


def test_writing_to_a_received_tensor_never_reaches_the_file():
    got = socket_roundtrip({"t": torch.ones(1 << 19)})["t"]
    got[:10] = 7.0
    with got._te_blob.mapped() as mm:
        assert torch.frombuffer(mm, dtype=torch.float32)[:10].eq(1.0).all()


def forged(fd_to_send, size):
    """A message naming one memory file of `size` bytes, sent with `fd_to_send`."""
    header = json.dumps({"body": {"__dict__": {"t": {"__tensor__": 0, "dtype": "uint8", "size": [size],
                                                     "stride": [1]}}}, "blobs": [{"shared": size}]}).encode()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        data = protocol._LEN.pack(len(header)) + header
        a.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd_to_send]))])
        return protocol.recv(b.fileno())


@pytest.mark.parametrize("how", ["unsealed", "regular file", "shorter than said"])
def test_a_descriptor_that_is_not_a_sealed_file_of_its_size_is_refused(how, tmp_path):
    if how == "regular file":
        path = tmp_path / "f"
        path.write_bytes(b"x" * 4096)
        fd = os.open(path, os.O_RDWR)
    else:
        fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 4096)
        if how == "shorter than said":
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    before = open_fds()
    try:
        with pytest.raises(protocol.ProtocolError):
            forged(fd, 8192 if how == "shorter than said" else 4096)
    finally:
        os.close(fd)
    assert open_fds() == before - 1  # what came with the message was closed
