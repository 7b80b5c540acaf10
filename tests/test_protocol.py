import os

import pytest
import torch

from fitness import protocol


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
