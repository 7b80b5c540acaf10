"""Messages between the engine and a worker: a JSON header followed by raw tensor bytes.

No pickle in either direction: the worker runs untrusted code, and unpickling its bytes in the
engine would hand that code the engine. Tensors travel as (dtype, size, stride, offset, storage
bytes) so non-contiguous layouts survive the trip; over a Unix socket, a large tensor's bytes
travel as a sealed memory file instead (fitness.process.shared_blob).
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any

import torch

from fitness.process.shared_blob import (
    MAX_FDS,
    SHARED_MIN_BYTES,
    BadBlob,
    SharedBlob,
    is_unix_socket,
    recv_with_fds,
    send_with_fds,
)

_LEN = struct.Struct("<Q")
MAX_HEADER = 64 << 20  # a header larger than this is a protocol violation, not data


class ProtocolError(Exception):
    pass


def _encode(obj: Any, blobs: list, shared: bool = False) -> Any:
    """`shared`: large tensors go as sealed memory files (fitness.process.shared_blob), appended to
    `blobs` as SharedBlob; the rest as views of their bytes."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        # keep only the storage span the view needs, so a slice of a huge base stays small
        span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) if t.numel() else 0
        head = {"dtype": str(t.dtype).removeprefix("torch."), "size": list(t.shape), "stride": list(t.stride())}
        if shared and span * t.element_size() >= SHARED_MIN_BYTES \
                and sum(isinstance(b, SharedBlob) for b in blobs) < MAX_FDS:
            # a tensor received as a memory file is handed on as it came (the engine never writes
            # to received outputs; its mapping is private all the same)
            blob = getattr(obj, "_te_blob", None)
            if not (isinstance(blob, SharedBlob) and t.storage_offset() == 0
                    and blob.size == span * t.element_size()):
                blob = SharedBlob.of(_span_bytes(t, span))
            blobs.append(blob)
        else:
            raw = _span_bytes(t, span)
            blobs.append((raw.cpu() if raw.device.type != "cpu" else raw).numpy().data)  # no copy on the host
        return {"__tensor__": len(blobs) - 1, **head}
    if isinstance(obj, (list, tuple)):
        return {"__seq__": [_encode(o, blobs, shared) for o in obj], "tuple": isinstance(obj, tuple)}
    if isinstance(obj, dict):
        return {"__dict__": {str(k): _encode(v, blobs, shared) for k, v in obj.items()}}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).removeprefix("torch.")}
    raise ProtocolError(f"cannot send a value of type {type(obj).__name__}")


def _span_bytes(t: torch.Tensor, span: int) -> torch.Tensor:
    """The bytes of the storage span a view covers, as one flat uint8 tensor on its device."""
    if not span:
        return torch.empty(0, dtype=torch.uint8)
    return torch.as_strided(t, (span,), (1,), t.storage_offset()).contiguous().view(torch.uint8)


def _decode(obj: Any, blobs: list[tuple[Any, SharedBlob | None]], device: str | torch.device | None) -> Any:
    """`blobs`: each tensor's bytes (a buffer), with the memory file they are mapped from."""
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            dtype = getattr(torch, obj["dtype"])
            raw, blob = blobs[obj["__tensor__"]]
            if len(raw):
                flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
            else:
                flat = torch.empty(0, dtype=dtype)
            if device is not None:
                flat, blob = flat.to(device), None
            t = torch.as_strided(flat, obj["size"], obj["stride"], 0)
            if blob is not None:
                t._te_blob = blob  # type: ignore[attr-defined]  # handed on as it came (_encode)
            return t
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
    blobs: list = []
    body = _encode(msg, blobs, shared=is_unix_socket(fd))
    layout = [{"shared": b.size} if isinstance(b, SharedBlob) else len(b) for b in blobs]
    header = json.dumps({"body": body, "blobs": layout}).encode()
    data = _LEN.pack(len(header)) + header
    fds = [b.fd for b in blobs if isinstance(b, SharedBlob)]
    # the descriptors go with the first bytes (the receiver's first read takes them)
    _write_all(fd, memoryview(data)[send_with_fds(fd, data, fds) if fds else 0:])
    for b in blobs:
        if not isinstance(b, SharedBlob):
            _write_all(fd, b)


def recv(fd: int, device: str | torch.device | None = None, max_bytes: int = 8 << 30) -> dict:
    """Read one message; `max_bytes` bounds what a misbehaving peer can make us allocate."""
    first, fds = recv_with_fds(fd, _LEN.size)
    owned = [SharedBlob(k, 0) for k in fds]  # closed on every way out unless a tensor keeps one
    if not first:
        raise EOFError("peer closed the channel")
    (n,) = _LEN.unpack(first + _read_into(fd, _LEN.size - len(first)))
    if n > MAX_HEADER:
        raise ProtocolError(f"message header of {n} bytes")
    head = json.loads(_read_into(fd, n))
    layout = head.get("blobs", [])
    if not isinstance(layout, list) or sum(_blob_size(e) for e in layout) > max_bytes:
        raise ProtocolError("message payload too large")
    blobs: list[tuple[Any, SharedBlob | None]] = []
    for entry in layout:
        if isinstance(entry, dict):
            if not owned:
                raise ProtocolError("a message names more memory files than it carries")
            blob = owned.pop(0)
            blob.size = _blob_size(entry)
            try:
                blobs.append((blob.mapped(), blob))
            except BadBlob as e:
                raise ProtocolError(str(e)) from None
        else:
            blobs.append((_read_into(fd, int(entry)), None))
    return _decode(head["body"], blobs, device)


def _blob_size(entry: Any) -> int:
    size = entry.get("shared") if isinstance(entry, dict) else entry
    if not isinstance(size, int) or size < 0:
        raise ProtocolError("a malformed blob size")
    return size


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
