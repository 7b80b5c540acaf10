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
