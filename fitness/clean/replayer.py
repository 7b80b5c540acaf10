"""A launch trace (fitness.candidate.recorder) replayed alone, in a clean process that never ran the
candidate's Python, on fresh inputs: what the replay runs, and how it decides what was work."""
from __future__ import annotations

from typing import Any

import torch

from fitness.clean.aten_ops import AtenOp, AtenRefused, resolve, returns_views
from fitness.clean.built import compile_for_launch, kernel_named
from fitness.clean.compiled import NotReplayable, check_launch_args, constants_dropped, launch_compiled, load_compiled
from fitness.clean.compiled import ReplayError as ReplayError  # re-exported: where a replay's failure was named
from fitness.clean.primitives import ALLOC, COPY, DTYPES, ENUMS, FILL, PRIMITIVES, READ, VIEW, Device, Prim, check_args
from fitness.clean.trace_check import check_trace as check_trace  # re-exported: the trace's shape, checked
from fitness.clean.trace_values import bytes_of, reinterpret, specialization, triton_dtype
from fitness.common.inputs import poison_value, work_elements


class Replayer:
    """Runs a trace again on given inputs, in a clean process; `torch_elements` is the torch work
    done. It runs only what the engine can name: the recorded compiled kernels (on a GPU), the
    kernels built from the candidate's source alone (`kernels`, under the interpreter:
    fitness.clean.kernel_source), and the engine's own primitives (fitness.clean.primitives)."""

    def __init__(self, trace: dict, device: str, kernels: dict[str, Any] | None = None,
                 inplace: tuple[int, ...] = (), destinations: bool = False, fill: str | None = "poison",
                 built: dict[str, Any] | None = None):
        """`inplace`: the inputs a task updates in place (its outputs, in order); `destinations`:
        the call's arguments include memory it writes its results to (a suite's wrapper, called
        with the benchmark's own arguments: destination passing), so an output may be an input;
        `fill`: what memory allocated for an output holds before the call writes it: "poison" (NaN,
        or the largest integer), so an element it leaves unwritten is wrong whatever the allocator
        handed back; "zero" for a suite's call, whose reference ran with `torch.empty` zeroed
        (suites.script.ZeroedEmpty), scratch zeroed too; None for a timed replay, whose outputs
        and scratch the timing scrambles outside the timed region (fitness.clean.timing).
        `built`: on a GPU, the JIT functions the engine built from the candidate's source: each
        launch's build is compiled from them here (fitness.clean.built), never loaded from the
        recorded binary; without it (diagnostics) the recorded binaries are loaded."""
        check_trace(trace, inplace, destinations)
        self.trace = trace
        self.inplace = inplace
        self.device = device
        self.interpreted = kernels is not None
        self.torch_elements = 0
        self.torch_ops: dict[str, int] = {}
        self.stale_reads: list[str] = []  # host reads whose replayed value differs from the recorded one
        self.carried: dict[int, int | None] = {}  # an integer read: recorded value -> the replay's (None: two)
        self.snapshots = {int(k): v.to(device) for k, v in trace["snapshots"].items()}
        outputs = {o["__t__"]["t"] for o in trace["outputs"]}
        # scratch: memory an allocation made that no output names; the replay's own, kept across
        # calls so a timing's graph holds its addresses, and scrambled before every pass
        # (fitness.clean.timing): nothing a call finds there is an earlier answer
        self._scratch_ids = {i for i, b in enumerate(trace["buffers"]) if b["from"] == "op"} - outputs
        self._arena: dict[int, torch.UntypedStorage] = {}
        self._fill = fill
        # under the interpreter the kernels the engine built from the source; on a GPU, builds compiled
        # here from the same source (as launches need them), or else the recorded binaries
        self.built = built
        self._builds: dict[tuple, Any] = {}
        self.kernels = kernels if kernels is not None else {} if built is not None else \
            {k: load_compiled(d) for k, d in trace["kernels"].items() if isinstance(k, str)}

    @property
    def writes_inputs(self) -> bool:
        """Whether an output of the call is one of its inputs (a destination, or an in-place update)."""
        buffers = self.trace["buffers"]
        return any(buffers[o["__t__"]["t"]]["from"] == "input" for o in self.trace["outputs"])

    def scratch(self) -> list[torch.Tensor]:
        """Byte views of the replay's scratch memory (what the timing scrambles before each pass)."""
        return [torch.empty(0, dtype=torch.uint8, device=s.device).set_(s) for s in self._arena.values()]

    def run_guarded(self, inputs: tuple) -> list[torch.Tensor]:
        """run(), then every input the task does not update in place checked unchanged, byte for
        byte, here in the clean child (the candidate's own process checks it too, as a filter)."""
        saved = {i: bytes_of(a).clone() for i, a in enumerate(inputs)
                 if type(a) is torch.Tensor and i not in self.inplace}
        outs = self.run(inputs)
        for i, before in saved.items():
            if not torch.equal(bytes_of(inputs[i]), before):
                raise ReplayError(f"the replayed call wrote input {i}, which the task does not update in place "
                                  "(a task that does says so: INPLACE)")
        return outs

    def run(self, inputs: tuple) -> list[torch.Tensor]:
        self.torch_elements = 0
        self.torch_ops = {}
        self.stale_reads = []
        self.carried = {}
        bufs: dict[int, torch.UntypedStorage] = {}
        self.written: set[int] = set()  # buffers a launch or a writing step touched
        for bid, b in enumerate(self.trace["buffers"]):
            if b["from"] == "input":
                a = inputs[b["index"]] if 0 <= b["index"] < len(inputs) else None
                if not isinstance(a, torch.Tensor) or a.untyped_storage().nbytes() != b["nbytes"]:
                    raise ReplayError(f"input {b['index']} does not have the recorded layout")
                bufs[bid] = a.untyped_storage()
            elif b["from"] == "snapshot":  # a module-level buffer: its recorded contents, afresh every call
                bufs[bid] = self.snapshots[bid].clone().untyped_storage()
        for ev in self.trace["events"]:
            if ev["kind"] == "op":
                self._op(ev, bufs)
            else:
                self._launch(ev, bufs)
        outs = [self._decode(o, bufs) for o in self.trace["outputs"]]
        for i, o in enumerate(self.trace["outputs"]):
            if o["__t__"]["t"] not in self.written:
                raise ReplayError(f"output {i} is memory that no recorded kernel or step wrote")
        return outs

    def _decode(self, x: Any, bufs: dict, kw: bool = False) -> Any:
        if isinstance(x, list):
            return [self._decode(v, bufs) for v in x]
        if isinstance(x, dict):
            if len(x) != 1:
                raise ReplayError("an unreadable object in the trace")
            (tag, v), = x.items()
            if tag == "__t__":
                return self._tensor(v, bufs)
            if tag == "__tw__":  # a compiled kernel's binary already reads it as its dtype: the pointer is all
                t = self._tensor(v, bufs)
                return t if not self.interpreted else reinterpret(t, v.get("as"))
            if tag == "__d__" and kw and isinstance(v, dict):
                return {str(k): self._decode(a, bufs) for k, a in v.items()}
            if tag == "__dtype__" and v in DTYPES:
                return DTYPES[v]
            if tag == "__device__":
                return Device()
            if tag == "__enum__" and v in ENUMS:
                return ENUMS[v]
            if tag == "__tdtype__":
                return triton_dtype(v)
            raise ReplayError(f"an object the replay does not know in the trace ({str(tag)[:40]})")
        if x is None or type(x) in (bool, int, float, str):
            return x
        raise ReplayError("an unreadable value in the trace")

    def _tensor(self, r: Any, bufs: dict) -> torch.Tensor:
        if not isinstance(r, dict) or type(r.get("t")) is not int or type(r.get("off")) is not int \
                or not _ints(r.get("size")) or not _ints(r.get("stride")) or r.get("dtype") not in DTYPES:
            raise ReplayError("an unreadable tensor in the trace")
        if r["t"] not in bufs:
            raise ReplayError(f"buffer {r['t']} used before the step that makes it")
        t = torch.empty(0, dtype=DTYPES[r["dtype"]], device=self.device)
        try:
            return t.set_(bufs[r["t"]], r["off"], r["size"], r["stride"])
        except (RuntimeError, ValueError, TypeError, OverflowError) as e:
            raise ReplayError(f"a recorded view does not fit its buffer: {e}") from None

    def _op(self, ev: dict, bufs: dict) -> None:
        """One recorded torch op: the engine's own primitive of that key, else the aten op of that
        name resolved in this process (fitness.clean.aten_ops); any other namespace fails."""
        key = f"{ev.get('name')}.{ev.get('overload') or 'default'}"
        if ev.get("ns") != "aten":
            raise ReplayError(f"torch did work outside Triton kernels that the replay cannot verify: the trace "
                              f"holds {str(ev.get('ns'))[:40]}::{key[:80]}, an op outside torch's own aten namespace")
        prim = PRIMITIVES.get(key)
        if prim is None:
            self._aten(ev, bufs)
            return
        args = self._decode(ev["args"], bufs)
        kwargs = self._decode(ev.get("kwargs") or {"__d__": {}}, bufs, kw=True)
        if not isinstance(kwargs, dict):
            raise ReplayError(f"{key}: unreadable keywords in the trace")
        check_args(key, prim, args, kwargs)
        if prim.effect == ALLOC and self._scratch(ev, bufs):
            return
        sources = {a.untyped_storage().data_ptr() for a in _flat(args) if isinstance(a, torch.Tensor)}
        try:
            out = prim.impl(self.device, *args, **kwargs)
        except (RuntimeError, ValueError, TypeError, IndexError, OverflowError) as e:
            raise ReplayError(f"{key} failed on the recorded arguments: {str(e)[:200]}") from None
        if prim.effect == ALLOC:
            self._poisoned(out)
        if prim.effect == READ:  # a number for the host, read on the replay's own values
            if args[0].numel() != 1:
                raise ReplayError(f"{key} did not read the one-element tensor the trace recorded")
            self._read(key, ev.get("out"), out)
            return
        made = self._bind(ev.get("out"), out, bufs, key)
        self._account(key, prim, args, out, made, sources)

    def _read(self, key: str, recorded: object, value: object) -> None:
        """A value the call's host code read (`.item()`, `bool(t)`): the recorded program carries
        the recorded value onwards, so where the replay's differs the replay notes it (a wrong
        result then is the replay's limit, not the candidate's: fitness.engine.replay). An integer
        read is carried: a launch's scalar argument or grid size equal to the recorded value takes
        the replay's (`_carry`), as the host code passing a read index or length on would."""
        if type(recorded) not in (bool, int, float):
            raise ReplayError(f"{key} did not read the one-element tensor the trace recorded")
        same = recorded == value or (isinstance(value, float) and value != value and recorded != recorded)
        if not same and type(recorded) is int and type(value) is int:
            self.carried[recorded] = value if self.carried.get(recorded, value) == value else None
        if not same and len(self.stale_reads) < 4:
            self.stale_reads.append(f"{key.split('.')[0]} read {value!r} on the replay's inputs where the call "
                                    f"recorded {recorded!r}")

    def _scratch(self, ev: dict, bufs: dict) -> bool:
        """An allocation no output names, bound to the replay's own scratch memory for its buffer
        (made once, then kept: see __init__); False when the step makes an output."""
        declared = ev.get("out")
        r = declared.get("__t__") if isinstance(declared, dict) else None
        bid = r.get("t") if isinstance(r, dict) else None
        if type(bid) is not int or bid not in self._scratch_ids or bid in bufs:
            return False
        storage = self._arena.get(bid)
        if storage is None:
            nbytes = self.trace["buffers"][bid]["nbytes"]
            made = torch.zeros if self._fill == "zero" else torch.empty
            storage = self._arena[bid] = made(nbytes, dtype=torch.uint8, device=self.device).untyped_storage()
        self._tensor(r, {bid: storage})  # the recorded view fits it, or a ReplayError
        bufs[bid] = storage
        return True

    def _poisoned(self, out: Any) -> None:
        """A new output allocation filled as __init__ says; scratch is the arena's."""
        if self._fill is not None and type(out) is torch.Tensor and out.numel():
            out.fill_(poison_value(out.dtype) if self._fill == "poison" else 0)

    def _aten(self, ev: dict, bufs: dict) -> None:
        """An aten op outside the primitive table, resolved here; its writes and views read from its
        schema, its results bound to the recorded buffers, its work counted. An allocation
        (aten::empty_permuted, ...) writes nothing: bound to scratch or poisoned as the table's are."""
        try:
            op = resolve(ev.get("name"), ev.get("overload"))
        except AtenRefused as e:
            raise (NotReplayable(str(e)) if e.limit else ReplayError(
                f"torch did work outside Triton kernels that the replay cannot verify: {e}")) from None
        if op.allocates and self._scratch(ev, bufs):
            return
        args = self._here(self._decode(ev["args"], bufs))
        kwargs = self._here(self._decode(ev.get("kwargs") or {"__d__": {}}, bufs, kw=True))
        if not isinstance(kwargs, dict):
            raise ReplayError(f"{op.key}: unreadable keywords in the trace")
        sources = {a.untyped_storage().data_ptr() for a in _flat(args) if isinstance(a, torch.Tensor)}
        owner = {s.data_ptr(): b for b, s in bufs.items()}
        try:
            out = op.op(*args, **kwargs)
        except (RuntimeError, ValueError, TypeError, IndexError, OverflowError, NotImplementedError) as e:
            raise ReplayError(f"{op.key} failed on the recorded arguments: {str(e)[:200]}") from None
        declared = ev.get("out")
        if type(declared) in (bool, int, float):  # a number for the host (aten::is_nonzero, aten::equal)
            self._read(op.key, declared, out)
            return
        made = [] if declared is None and out is None else self._bind_sized(op, declared, out, bufs)
        if op.allocates:
            self._poisoned(out)
            return
        writes = [owner[t.untyped_storage().data_ptr()] for t in op.written(args, kwargs)
                  if t.untyped_storage().data_ptr() in owner]
        results = [o for o in _flat(out) if isinstance(o, torch.Tensor)]
        view = not writes and returns_views(op) and all(o.untyped_storage().data_ptr() in sources for o in results)
        if view:
            return
        self.written.update(writes + made)
        n = work_elements(args, out)
        self.torch_elements += n
        self.torch_ops[op.key] = self.torch_ops.get(op.key, 0) + n

    def _bind_sized(self, op: AtenOp, declared: Any, out: Any, bufs: dict) -> list[int]:
        """_bind, where a result whose size depends on the values (aten::nonzero) is the replay's
        limit when it differs from the recorded one."""
        try:
            return self._bind(declared, out, bufs, op.key)
        except ReplayError as e:
            if torch.Tag.dynamic_output_shape in op.op.tags or torch.Tag.data_dependent_output in op.op.tags:
                raise NotReplayable(f"a result whose shape depends on the values ({e})") from None
            raise

    def _here(self, x: Any) -> Any:
        """Decoded arguments with every device the trace named made the replay's own."""
        if isinstance(x, Device):
            return torch.device(self.device)
        if isinstance(x, list):
            return [self._here(v) for v in x]
        if isinstance(x, dict):
            return {k: self._here(v) for k, v in x.items()}
        return x

    def _account(self, key: str, prim: Prim, args: list, out: Any, made: list[int], sources: set[int]) -> None:
        """Work by what the step did to memory: a view whose result left its source's storage is
        a copy; a copy or arithmetic counts the elements it read or wrote."""
        results = [o for o in _flat(out) if isinstance(o, torch.Tensor)]
        copied = prim.effect == COPY or (prim.effect == VIEW and any(
            o.untyped_storage().data_ptr() not in sources for o in results))
        if prim.effect in (FILL, COPY) or copied:
            self.written.update(made)
        if copied:
            n = work_elements(args, out)
            self.torch_elements += n
            self.torch_ops[key] = self.torch_ops.get(key, 0) + n

    def _bind(self, declared: Any, actual: Any, bufs: dict, key: str) -> list[int]:
        """The step's results against what the trace says it returned, buffer by buffer; the
        buffers bound (a new one only where the trace names a buffer the call made)."""
        if isinstance(declared, list) and isinstance(actual, (list, tuple)) and len(declared) == len(actual):
            return [b for d, a in zip(declared, actual) for b in self._bind(d, a, bufs, key)]
        if not (isinstance(declared, dict) and isinstance(declared.get("__t__"), dict)
                and type(actual) is torch.Tensor):
            raise ReplayError(f"{key} did not return what the trace recorded")
        r = declared["__t__"]
        got = {"size": list(actual.shape), "stride": list(actual.stride()), "off": actual.storage_offset(),
               "dtype": str(actual.dtype).removeprefix("torch.")}
        if any(r.get(k) != v for k, v in got.items()):
            raise ReplayError(f"{key} returned {tuple(actual.shape)} {actual.dtype} at stride "
                              f"{tuple(actual.stride())}, not the recorded tensor")
        bid, storage = r.get("t"), actual.untyped_storage()
        buffers = self.trace["buffers"]
        if type(bid) is not int or not 0 <= bid < len(buffers):
            raise ReplayError(f"{key} returned a buffer the trace does not list")
        if bid in bufs:
            if bufs[bid].data_ptr() != storage.data_ptr():
                raise ReplayError(f"{key} returned memory other than the recorded buffer {bid}")
        elif buffers[bid]["from"] != "op" or buffers[bid]["nbytes"] != storage.nbytes() or \
                any(s.data_ptr() == storage.data_ptr() for s in bufs.values()):
            raise ReplayError(f"{key} returned memory that does not match the recorded new buffer {bid}")
        else:
            bufs[bid] = storage
        return [bid]

    def _launch(self, ev: dict, bufs: dict) -> None:
        args = self._decode(ev["args"], bufs)
        recorded, name = ev.get("grid"), ev.get("kernel")
        if not isinstance(recorded, list) or not _ints(recorded) or not 1 <= len(recorded) <= 3:
            raise ReplayError("recorded grid out of range")
        grid = tuple(self._carry(g) for g in recorded) + (1,) * (3 - len(recorded))
        if any(g < 0 or g > 2**31 for g in grid):  # after carrying: a read the replay made is bounded too
            raise ReplayError(f"grid {grid} out of range")
        kernel = self.kernels.get(name) if isinstance(name, str) else None
        if kernel is None and self.built is not None and isinstance(name, str) and name in self.trace["kernels"]:
            kernel = kernel_named(self.built, self.trace["kernels"][name].get("name"))
        if kernel is None:
            raise ReplayError(f"a launch names a kernel the replay does not have: {str(ev.get('kernel'))[:120]}")
        fixed = set(getattr(kernel, "constexprs", ()))  # a constexpr is the build's, never a read's
        names = list(getattr(kernel, "arg_names", ()))
        args = [a if i in fixed else self._carry(a) for i, a in enumerate(args)]
        self.written.update(r["t"] for r in _tensor_refs(ev["args"]))
        if self.interpreted:
            kwargs = self._decode(ev.get("kwargs") or {"__d__": {}}, bufs, kw=True)
            if not isinstance(kwargs, dict):
                raise ReplayError("a launch's keywords cannot be read")
            kwargs = {k: v if k in names and names.index(k) in fixed else self._carry(v) for k, v in kwargs.items()}
            self.written.update(r["t"] for r in _tensor_refs(ev.get("kwargs")))
            kernel.run(*args, grid=grid, warmup=False, **kwargs)
        else:
            kernel = self._compiled(str(name), kernel, args, grid)
            args = constants_dropped(kernel, args)
            check_launch_args(kernel, args)
            launch_compiled(kernel, grid, args)

    def _carry(self, v: Any) -> Any:
        """An integer the recorded call passed on, as the replay's own read where it is one."""
        carried = self.carried.get(v) if type(v) is int else None
        return v if carried is None else carried

    def _compiled(self, name: str, kernel: Any, args: list, grid: tuple) -> Any:
        """The launch's kernel: the recorded binary loaded (no `built`), or the build compiled here,
        once for each specialization Triton would make of these arguments (16-byte alignment of
        pointers, integers equal to 1 or divisible by 16)."""
        if self.built is None:
            return kernel
        key = (name,) + tuple(specialization(a) for a in args)
        if key not in self._builds:
            self._builds[key] = compile_for_launch(self.trace["kernels"][name], kernel, args, grid)
        return self._builds[key]


def _ints(v: object) -> bool:
    return isinstance(v, list) and all(type(i) is int for i in v)


def _flat(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in _flat(v)]
    return [x]


def _tensor_refs(x: Any) -> list[dict]:
    """Every tensor a recorded argument names (a launch may write any of them)."""
    if isinstance(x, list):
        return [r for v in x for r in _tensor_refs(v)]
    if isinstance(x, dict):
        for tag in ("__t__", "__tw__"):
            if tag in x and isinstance(x[tag], dict):
                return [x[tag]]
        return [r for v in x.values() for r in _tensor_refs(v)]
    return []
