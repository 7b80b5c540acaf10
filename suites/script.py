"""Pieces shared by the data-backed suites, whose tasks are scripts rather than pure functions.

A TritonBench task is a module (kernels + wrapper) followed by test code that leaves its outputs
in `result_gold`; a KernelBench task is a `Model` with input makers. Both are judged the same
way: the candidate and the suite's reference run the same test in a worker, and the engine
compares the two result trees. `ScriptRunner` is what a worker calls; it never runs in the engine.
"""
from __future__ import annotations

import ast
import os
import random
import re
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from suites.ast_lock import parse
from suites.data import SEPARATOR
from suites.registry import SuiteError

# per output dtype: (atol, rtol); atol is scaled by the tensor's largest magnitude (compare_tree)
TOLERANCE = {
    "float64": (1e-7, 1e-7), "float32": (1e-3, 1e-3), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2),
    "float8_e4m3fn": (0.125, 0.125), "float8_e5m2": (0.25, 0.25), "float8_e4m3fnuz": (0.125, 0.125),
    "float8_e5m2fnuz": (0.25, 0.25), "complex64": (1e-3, 1e-3),
    **{t: (0.0, 0.0) for t in ("int8", "uint8", "int16", "int32", "int64", "bool", "uint16", "uint32", "uint64")},
}
GIVEN = "given"  # the dtype of a case whose inputs come from the suite as they are

# name fragment -> category, first match wins (TritonBench has no categories of its own)
_CATEGORIES = (
    ("attention", r"attn|attention|flash|mha|gqa|lightning"),
    ("quantization", r"quant|int8|int4|fp8|f8|w8a|mxfp"),
    ("matmul", r"matmul|gemm|_mm|^mm|bmm|dot|linear|matrix|vecmat|gemv"),
    ("convolution", r"conv"),
    ("normalization", r"norm|rms"),
    ("softmax", r"softmax"),
    ("loss", r"loss|entropy|kldiv|nll"),
    ("position", r"rotary|rope|embedding|alibi"),
    ("pooling", r"pool"),
    ("activation", r"relu|gelu|silu|swiglu|geglu|sigmoid|tanh|act|elu|swish|mish"),
    ("reduction", r"sum|mean|reduce|max|min|argm|cumsum|cumprod|var|std|prod|scan"),
    ("memory", r"copy|transpose|index|gather|scatter|cat|cache|flip|swizzle|permute|select|pad"),
    ("random", r"rand|dropout"),
    ("elementwise", r"add|mul|sub|div|elementwise|scale|clamp|exp|pow|abs"),
)


def guess_category(name: str) -> str:
    low = name.lower()
    for category, pattern in _CATEGORIES:
        if re.search(pattern, low):
            return category
    return "other"


def split_kernel_file(path: Path, exact: bool = True) -> tuple[str, str]:
    """(module code, test code) of a kernel file, split at its line of 146 '#' (`exact` False:
    the first line of 140 or more '#' alone, as the ROCm set's files have 146 to 149)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: cannot read ({e})") from None
    lines = text.split("\n")
    if exact:
        i = lines.index(SEPARATOR) if SEPARATOR in lines else None
    else:
        i = next((k for k, ln in enumerate(lines) if len(ln.strip()) >= 140 and set(ln.strip()) == {"#"}), None)
    if i is None:
        raise SuiteError(f"{path}: no separator line of 146 '#' between the kernel and its test")
    module, test = "\n".join(lines[:i]) + "\n", "\n".join(lines[i + 1:]) + "\n"
    return module + hoisted_imports(module, test), test


def hoisted_imports(module: str, test: str) -> str:
    """The test part's top-level imports of names the kernel part uses without binding them.
    In the suite's one file they ran before any call (block_sparse_attn calls `torch.empty` and
    imports torch only below the separator): the kernel alone, as the timing loads it, needs them."""
    try:
        mod, tst = parse(module), parse(test)
    except SyntaxError:
        return ""
    bound = set()
    for node in mod.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    used = {n.id for n in ast.walk(mod) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    missing = used - bound
    keep = [node for node in tst.body
            if (isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and node.level == 0))
            and {(a.asname or a.name).split(".")[0] for a in node.names} & missing]
    return "".join(f"{ast.unparse(node)}\n" for node in keep)


def write_temp(name: str, text: str) -> str:
    """A file for code that Triton must read back (@triton.jit wants its source file)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="te-src-")) / name
    path.write_text(text)
    return str(path)


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass


class _ToCpu(ast.NodeTransformer):
    """Rewrites device choices for the Triton interpreter: 'cuda' -> 'cpu', x.cuda() -> x.cpu(),
    x.is_cuda -> True, torch.cuda.synchronize() -> None. Applied to candidate and reference alike."""

    def visit_Constant(self, node):
        if isinstance(node.value, str) and (node.value == "cuda" or node.value.startswith("cuda:")):
            return ast.copy_location(ast.Constant("cpu"), node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "cuda":
            return ast.copy_location(ast.Call(ast.Attribute(f.value, "cpu", ast.Load()), [], []), node)
        if ast.unparse(f) in ("torch.cuda.synchronize", "torch.cuda.empty_cache"):
            return ast.copy_location(ast.Constant(None), node)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Constant(True), node)
        return node


def cpu_rewrite(source: str) -> str:
    try:
        tree = parse(source)
    except SyntaxError:
        return source  # the worker's import reports it, with the line
    return ast.unparse(ast.fix_missing_locations(_ToCpu().visit(tree)))


def interpreting() -> bool:
    """Kernels run under the Triton interpreter on CPU tensors (how the pool starts CPU workers)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def for_here(source: str) -> str:
    """Suite or candidate code as it must run in this process: device choices rewritten to the
    CPU under the interpreter, untouched on a GPU."""
    return cpu_rewrite(source) if interpreting() else source


def to_wire(tree):
    """A copy the protocol can carry: tensors on the CPU, containers kept, other objects by name."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, torch.Size):
        return tuple(int(s) for s in tree)
    if isinstance(tree, dict):
        return {str(k): to_wire(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_wire(v) for v in tree) if type(tree) in (list, tuple) else tuple(map(to_wire, tree))
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, torch.dtype):
        return str(tree)
    try:
        import numpy

        if isinstance(tree, numpy.ndarray):
            return torch.from_numpy(tree.copy())
        if isinstance(tree, numpy.generic):
            return tree.item()
    except ImportError:
        pass
    return f"<{type(tree).__name__} object>"


def tensors_of(tree) -> list:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in tensors_of(v)]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in tensors_of(v)]
    return []


class ScriptRunner:
    """What a worker needs to run one script task. Subclasses implement the suite's way of
    testing a module (`run_test`) and of calling it on the timing inputs (`bind`, `perf_args`)."""

    perf_count = 0  # number of timing inputs
    torch_work_relative = True  # candidate's torch work is bounded by the reference's (else only reported)
    reference_source = ""  # the suite's reference, run by the worker the same way as a candidate
    reference_entry = ""  # the name the reference defines (a candidate defines the task's entry)
    baseline_name = "the suite's reference"

    def run_test(self, module, seed: int, entry: str):
        raise NotImplementedError

    def perf_args(self, index: int, seed: int) -> tuple:
        raise NotImplementedError

    def perf_bytes(self) -> list[int]:
        """Bytes of each timing input's tensors (0: not known without drawing it)."""
        return [0] * self.perf_count

    def bind(self, module, entry: str):
        """fn(*perf_args) -> output tree, calling `module`'s implementation."""
        raise NotImplementedError

    def cost(self, index: int, seed: int) -> tuple[float, float]:
        return 0.0, 0.0


# torch functions that make a tensor from nothing: where the benchmark inputs' data comes from
_FACTORIES = {
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "zeros", "ones", "empty",
    "full", "arange", "linspace", "logspace", "tensor", "eye", "normal", "zeros_like", "ones_like", "empty_like",
    "full_like", "as_tensor", "from_numpy", "empty_strided", "bernoulli", "multinomial",
}


class LazyFactories(TorchFunctionMode):
    """While a suite builds its benchmark inputs: factory calls not in `wanted` (by call order)
    make meta tensors, and every tensor remembers the factory calls it came from. `wanted=None`
    makes everything real."""

    def __init__(self, wanted: set | None):
        super().__init__()
        self.wanted, self.calls = wanted, 0
        self.origin: dict[int, frozenset] = {}
        self.keep: list = []  # holds the tensors, so ids stay unique while the map is in use

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name in _FACTORIES and getattr(func, "__module__", "") in ("torch", "torch._C._VariableFunctions", None):
            k, self.calls = self.calls, self.calls + 1
            if self.wanted is not None and k not in self.wanted:
                kwargs["device"] = "meta"
                kwargs.pop("generator", None)
                kwargs.pop("pin_memory", None)
            out = func(*args, **kwargs)
            if name.startswith("empty") and isinstance(out, torch.Tensor) and out.device.type != "meta":
                out.zero_()  # an output buffer: the same (zero) in every worker, as ZeroedEmpty does for tests
            src = frozenset({k})
        else:
            out = func(*args, **kwargs)
            src = frozenset().union(*(self.origin.get(id(t), frozenset()) for t in tensors_of((args, kwargs))))
        if self.wanted is not None and not self.wanted:  # the layout pass: track where tensors come from
            for t in tensors_of(out):
                self.origin[id(t)] = src
                self.keep.append(t)
        return out

    def origins(self, item) -> set:
        return set().union(*(self.origin.get(id(t), frozenset()) for t in tensors_of(item)))


_EMPTY_OPS = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"}


class ZeroedEmpty(TorchDispatchMode):
    """`torch.empty` and friends return zeros while a script task's test runs. Several suite
    tests hand uninitialized buffers to kernels that read them; in a fresh process (how the suites
    were written to run) such memory happens to be zero, in a long-lived worker it is whatever the
    last candidate left. Zeroing makes the reference and every candidate see the same."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "overloadpacket", None) is not None and func.overloadpacket.__name__ in _EMPTY_OPS:
            if isinstance(out, torch.Tensor) and out.device.type != "meta":
                out.zero_()
        return out


def describe_inputs(args: tuple, limit: int = 400) -> str:
    """What a timed call gets, for prompts: each argument's dtype and sizes (strides where not
    contiguous), so a per-shape time says which sizes are behind it."""
    text = ", ".join(_describe(a) for a in args)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _describe(a) -> str:
    if isinstance(a, torch.Tensor):
        out = f"{str(a.dtype).removeprefix('torch.')}[{', '.join(str(s) for s in a.shape)}]"
        return out if a.is_contiguous() else f"{out} strides ({', '.join(str(s) for s in a.stride())})"
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_describe(v) for v in a[:4]) + (f", ... ({len(a)} items)" if len(a) > 4 else "")
        return f"[{inner}]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in list(a.items())[:4]) + "}"
    if a is None or isinstance(a, (bool, int, float, str)):
        return repr(a)[:40]
    return type(a).__name__
