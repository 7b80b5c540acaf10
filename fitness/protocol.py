"""Messages between the engine and a worker: a JSON header followed by raw tensor bytes.

No pickle in either direction: the worker runs untrusted code, and unpickling its bytes in the
engine would hand that code the engine. Tensors travel as (dtype, size, stride, offset, storage
bytes) so non-contiguous layouts survive the trip.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any

import torch

_LEN = struct.Struct("<Q")
MAX_HEADER = 64 << 20  # a header larger than this is a protocol violation, not data


class ProtocolError(Exception):
    pass


def _encode(obj: Any, blobs: list[memoryview]) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        # keep only the storage span the view needs, so a slice of a huge base stays small
        span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) if t.numel() else 0
        flat = torch.as_strided(t, (span,), (1,), t.storage_offset()) if span else t.reshape(0)
        raw = flat.contiguous().view(torch.uint8) if span else torch.empty(0, dtype=torch.uint8)
        blobs.append(raw.numpy().data)  # the tensor's own bytes (a view of them), written out without a copy
        return {"__tensor__": len(blobs) - 1, "dtype": str(t.dtype).removeprefix("torch."),
                "size": list(t.shape), "stride": list(t.stride())}
    if isinstance(obj, (list, tuple)):
        return {"__seq__": [_encode(o, blobs) for o in obj], "tuple": isinstance(obj, tuple)}
    if isinstance(obj, dict):
        return {"__dict__": {str(k): _encode(v, blobs) for k, v in obj.items()}}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).removeprefix("torch.")}
    raise ProtocolError(f"cannot send a value of type {type(obj).__name__}")


def _decode(obj: Any, blobs: list[bytearray], device: str | torch.device | None) -> Any:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            dtype = getattr(torch, obj["dtype"])
            raw = blobs[obj["__tensor__"]]
            if raw:
                flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
            else:
                flat = torch.empty(0, dtype=dtype)
            if device is not None:
                flat = flat.to(device)
            return torch.as_strided(flat, obj["size"], obj["stride"], 0)
        if "__seq__" in obj:
            seq = [_decode(o, blobs, device) for o in obj["__seq__"]]
            return tuple(seq) if obj.get("tuple") else seq
        if "__dict__" in obj:
            return {k: _decode(v, blobs, device) for k, v in obj["__dict__"].items()}
        if "__dtype__" in obj:
            return getattr(torch, obj["__dtype__"])
        raise ProtocolError("unknown object in message")
    return obj


def send(fd: int, msg: dict) -> None:
    blobs: list[memoryview] = []
    header = json.dumps({"body": _encode(msg, blobs), "blobs": [len(b) for b in blobs]}).encode()
    _write_all(fd, _LEN.pack(len(header)) + header)
    for b in blobs:
        _write_all(fd, b)


def recv(fd: int, device: str | torch.device | None = None, max_bytes: int = 8 << 30) -> dict:
    """Read one message; `max_bytes` bounds what a misbehaving peer can make us allocate."""
    (n,) = _LEN.unpack(_read_into(fd, _LEN.size))
    if n > MAX_HEADER:
        raise ProtocolError(f"message header of {n} bytes")
    head = json.loads(_read_into(fd, n))
    sizes = head.get("blobs", [])
    if not isinstance(sizes, list) or sum(int(s) for s in sizes) > max_bytes:
        raise ProtocolError("message payload too large")
    blobs = [_read_into(fd, int(s)) for s in sizes]
    return _decode(head["body"], blobs, device)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]


def _read_into(fd: int, n: int) -> bytearray:
    """n bytes read straight into one buffer (for a tensor's bytes, joining chunks would copy them)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:got + (1 << 24)]])
        if not k:
            raise EOFError("peer closed the channel")
        got += k
    return buf
