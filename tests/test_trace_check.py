"""fitness.clean.trace_check: the one gate every trace passes before any of it runs; and the torch glue
a TORCH_OPS task's wrapper records, replayed by the engine's own primitives and counted as work."""
import pytest
import torch

from fitness.candidate.recorder import Recorder
from fitness.clean.compiled import ReplayError
from fitness.clean.replayer import Replayer
from fitness.clean.trace_check import check_trace


def _trace(outputs_from: list[tuple[str, int]]) -> dict:
    """A trace of two input buffers and one made buffer, whose outputs name the given buffers."""
    buffers = [{"from": "input", "index": 0, "nbytes": 16}, {"from": "input", "index": 1, "nbytes": 16},
               {"from": "op", "nbytes": 16}]
    ids = {("input", 0): 0, ("input", 1): 1, ("op", 0): 2}
    ref = {"off": 0, "size": [4], "stride": [1], "dtype": "float32"}
    return {"events": [], "buffers": buffers, "kernels": {}, "snapshots": {},
            "outputs": [{"__t__": {**ref, "t": ids[o]}} for o in outputs_from]}


def test_an_output_that_is_an_input_is_refused_unless_the_task_updates_that_input_in_place():
    check_trace(_trace([("op", 0)]))
    with pytest.raises(ReplayError, match="output 0 of the trace is input 0 of the call, which the task does not "
                       "update in place"):
        check_trace(_trace([("input", 0)]))
    check_trace(_trace([("input", 1)]), destinations=True)  # a suite's wrapper writing its caller's tensor
    check_trace(_trace([("input", 0), ("input", 1)]), inplace=(0, 1))
    with pytest.raises(ReplayError, match="is input 1 of the call, not the input the task updates in place"):
        check_trace(_trace([("input", 1)]), inplace=(0,))
    with pytest.raises(ReplayError, match="is input 1 of the call"):  # more outputs than updated inputs
        check_trace(_trace([("input", 0), ("input", 1)]), inplace=(0,))


def _glue(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Torch glue as a quantizing wrapper writes it: reductions, clamps, rounding, a matmul."""
    scale = w.abs().amax(dim=0).clamp_min(1e-8) / 127.0
    wq = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
    return torch.where(x > 0, x, x * 0.5) @ (wq.to(torch.float32) * scale) + x.sum(dim=1, keepdim=True)


def test_torch_glue_replays_on_fresh_inputs_through_the_engines_primitives_and_counts_as_work():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 16, generator=gen), torch.randn(16, 4, generator=gen)
    rec = Recorder((x, w))
    with rec:
        out = _glue(x, w)
    trace = rec.trace([out])
    x2, w2 = torch.randn(8, 16, generator=gen), torch.randn(16, 4, generator=gen)
    rep = Replayer(trace, "cpu", {})
    [got] = rep.run((x2, w2))
    assert torch.equal(got, _glue(x2, w2))
    ops = set(rep.torch_ops)
    assert {"amax.default", "clamp_min.default", "round.default", "clamp.default", "mm.default",
            "where.self", "sum.dim_IntList"} <= ops, ops
    assert rep.torch_elements >= x.numel() + w.numel()


def _wrapper_ops(x: torch.Tensor, i: torch.Tensor) -> list[torch.Tensor]:
    """Indexing, padding, sorting and row-wise math as wrappers around kernels do them."""
    vals, idx = x.max(dim=1)
    top, top_i = x.topk(2, dim=1)
    srt, _ = x.sort(dim=1, descending=True)
    y = torch.nn.functional.pad(x, (1, 2), value=0.5).index_select(0, i).flip(0).repeat(2, 1)
    z = x.masked_fill(x > 0.5, 0.0).gather(1, torch.zeros(x.shape[0], 1, dtype=torch.long))
    w = torch.softmax(x, -1) + torch.log_softmax(x, -1) + torch.nn.functional.gelu(x, approximate="tanh")
    n = x.var(dim=1) + x.norm(dim=1) + x[i].sum() + torch.tensor([1.0, 2.0, 3.0, 4.0])[: x.shape[0]]
    return [vals, idx, top, top_i, srt, y, z, w, n]


def test_indexing_sorting_and_row_math_in_a_wrapper_replay_to_what_torch_gives_on_fresh_inputs():
    gen = torch.Generator().manual_seed(1)
    x, i = torch.randn(4, 6, generator=gen), torch.tensor([2, 0])
    rec = Recorder((x, i))
    with rec:
        outs = _wrapper_ops(x, i)
    x2 = torch.randn(4, 6, generator=gen)
    rep = Replayer(rec.trace(outs), "cpu", {})
    got = rep.run((x2, torch.tensor([1, 3])))
    want = _wrapper_ops(x2, torch.tensor([1, 3]))
    assert len(got) == len(want) and all(torch.allclose(g, w) for g, w in zip(got, want))
    assert {"max.dim", "topk.default", "sort.default", "constant_pad_nd.default", "index.Tensor",
            "gather.default", "_softmax.default", "linalg_vector_norm.default"} <= set(rep.torch_ops)
