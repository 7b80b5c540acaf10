"""Any deterministic op of torch's own `aten` namespace, resolved in the clean replaying process
(fitness.clean.replayer) when the engine's primitive table (fitness.clean.primitives) has no entry for it.

The closed table refused honest wrappers (measured on the H100 at 8ae4158: `count_nonzero`, `randn`,
`logsumexp` in TritonBench starting kernels, `round_`/`clamp_` on a temporary). A trace's op name is
the candidate's word, so it is only ever a key into torch's `aten` namespace, read here, in a process
that never imported the candidate: the name must be an identifier, the object found must be an
`OpOverload` of the `aten` namespace, and ops that act on anything but tensor values (storage,
streams, the host, assertions) are refused. What the op does to memory is read from its schema,
never from its name: arguments it marks written are the step's writes, results that alias an
argument are views (re-checked after the step), every other result is new memory it wrote. Random
ops draw from the replaying process's generator, which the engine seeds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import torch

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,95}$")
_OVERLOAD = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")

# ops whose effect is not a tensor's values: storage and allocator plumbing, streams, the host,
# assertions, cross-device copies; the replay lays out memory itself (fitness.clean.replayer)
REFUSED = frozenset({
    "set_", "resize_", "resize_as_", "record_stream", "_local_scalar_dense", "item", "_assert_async",
    "_functional_assert_async", "_assert_scalar", "_functional_assert_scalar", "_print", "pin_memory",
    "_pin_memory", "is_pinned", "_copy_from", "_copy_from_and_resize", "_to_cpu", "_nested_tensor_from_mask",
    "data", "_unsafe_set_version_counter", "_version", "retain_grad", "requires_grad_", "_make_dep_token",
    "_cudnn_init_dropout_state", "_fused_sdp_choice", "lift", "lift_fresh_copy", "_sparse_coo_tensor_unsafe",
    "_has_compatible_shallow_copy_type", "_set_grad_enabled", "_propagate_xla_data", "_debug_has_internal_overlap",
})


class AtenRefused(Exception):
    """The trace names an op the replay will not run; the message names it. `limit`: a real op
    the replay does not model (the engine's limit); else a name no op of torch's aten has (a
    trace that lies, or another torch's op: the candidate's)."""

    def __init__(self, message: str, limit: bool = False):
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True)
class AtenOp:
    """One resolved aten overload: the callable, which of its positional/keyword arguments it
    writes (by the schema's alias annotations), and whether it only allocates."""
    key: str
    op: torch._ops.OpOverload
    written_args: tuple[str, ...]
    allocates: bool  # returns new memory it leaves unwritten (aten::empty_permuted, aten::new_empty_strided)

    def written(self, args: list, kwargs: dict) -> list[torch.Tensor]:
        """The tensors this call writes, by the schema's names and positions."""
        got: list[torch.Tensor] = []
        for i, a in enumerate(self.op._schema.arguments):
            if a.name not in self.written_args:
                continue
            v = args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)
            got += [t for t in (v if isinstance(v, (list, tuple)) else [v]) if type(t) is torch.Tensor]
        return got


@lru_cache(maxsize=512)
def resolve(name: object, overload: object) -> AtenOp:
    """The aten overload `name.overload`, or AtenRefused saying why it is not run."""
    if not isinstance(name, str) or not _IDENT.match(name) or name.startswith("__"):
        raise AtenRefused(f"an op name that is not an aten identifier ({str(name)[:60]!r})")
    overload = overload or "default"
    if not isinstance(overload, str) or not _OVERLOAD.match(overload):
        raise AtenRefused(f"aten::{name}: an overload name that is not an identifier")
    key = f"aten::{name}.{overload}"
    if name in REFUSED or name.rstrip("_") in REFUSED:
        raise AtenRefused(f"{key} acts on more than tensor values (storage, streams, the host)", limit=True)
    try:
        packet = getattr(torch.ops.aten, name)
        op = getattr(packet, overload)
    except (AttributeError, RuntimeError):
        raise AtenRefused(f"{key} is not an op of this torch") from None
    if type(packet) is not torch._ops.OpOverloadPacket or type(op) is not torch._ops.OpOverload \
            or op.namespace != "aten":
        raise AtenRefused(f"{key} is not an aten op")
    written = tuple(a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write)
    allocates = name.startswith(("empty", "new_empty")) and not written
    return AtenOp(key, op, written, allocates)


def returns_views(op: AtenOp) -> bool:
    """Whether the op's results alias an argument (a view, or the written argument itself)."""
    return any(r.alias_info is not None for r in op.op._schema.returns)
