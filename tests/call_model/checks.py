"""The checks of tests/test_call_model.py, run in a process of their own under the Triton
interpreter (Triton reads TRITON_INTERPRET when triton.language is first imported, and a pytest
worker has imported it compiled): `python -m tests.call_model.checks` prints one JSON line,
{check: "ok" or the failure}."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before Triton reads it: the kernels run as Python here

import pytest
import torch

from fitness.candidate.harness import LaunchHook
from fitness.candidate.recorder import Recorder
from fitness.clean.aten_ops import AtenRefused, resolve
from fitness.clean.compiled import NotReplayable
from fitness.clean.kernel_source import constexpr_params, kernels_from_source
from fitness.clean.replayer import Replayer, ReplayError
from fitness.clean.timing import TimedSide
from fitness.engine.replay import program_problem
from fitness.process.child import module_name

HERE = Path(__file__).parent
_HOOK = LaunchHook()
_HOOK.install()


def _load(name: str):
    source = (HERE / f"{name}.py").read_text()
    mod_name = module_name(source)
    spec = importlib.util.spec_from_file_location(mod_name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod, kernels_from_source(source, mod_name)


def _record(mod, args: tuple) -> dict:
    rec = Recorder(args)
    _HOOK.recorder = rec
    try:
        with rec:
            out = mod.call(*args)
    finally:
        _HOOK.recorder = None
    return rec.trace(list(out) if isinstance(out, (list, tuple)) else [out])


def _replay(name: str, make, destinations: bool = False) -> tuple[Replayer, list, tuple]:
    """The call recorded on make(1) (after a first call on make(0)), replayed on make(2)."""
    mod, kernels = _load(name)
    _record(mod, make(0))
    trace = _record(mod, make(1))
    fresh = make(2)
    rep = Replayer(trace, "cpu", kernels, destinations=destinations)
    return rep, rep.run(fresh), mod.expected(*make(2))


def _vec(seed: int, n: int = 256) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def check_a_destination_the_suites_call_writes_and_returns_is_replayed_and_compared_as_an_output():
    rep, outs, want = _replay("destination_add", lambda s: (_vec(s), _vec(s + 10), torch.zeros(256)),
                              destinations=True)
    torch.testing.assert_close(outs[0], want)
    assert rep.writes_inputs  # the timing restores the destination before every pass


def check_a_function_tasks_output_that_is_its_input_is_refused_naming_the_input():
    with pytest.raises(ReplayError, match="output 0 of the trace is input 2 of the call, which the task does not"):
        _replay("destination_add", lambda s: (_vec(s), _vec(s + 10), torch.zeros(256)))


def check_an_input_the_replayed_call_writes_fails_in_the_clean_replay_naming_it():
    mod, kernels = _load("writes_input")
    trace = _record(mod, (_vec(1),))
    rep = Replayer(trace, "cpu", kernels)
    with pytest.raises(ReplayError, match="the replayed call wrote input 0, which the task does not update in place"):
        rep.run_guarded((_vec(2),))
    torch.testing.assert_close(Replayer(trace, "cpu", kernels, inplace=(0,)).run_guarded((_vec(2),))[0], _vec(2) * 2)


def check_a_module_level_buffer_the_kernel_writes_and_returns_is_replayed():
    _, outs, want = _replay("module_buffer", lambda s: (_vec(s),))
    torch.testing.assert_close(outs[0], want)


def check_aten_ops_outside_the_old_table_and_in_place_forms_on_a_temporary_replay_and_count_as_torch_work():
    rep, outs, want = _replay("aten_outside_table", lambda s: (torch.randn(4, 64, generator=torch.Generator()
                                                                           .manual_seed(s)),))
    for got, exp in zip(outs, want):
        torch.testing.assert_close(got, exp)
    assert {"aten::round_.default", "aten::logsumexp.default", "aten::count_nonzero.default"} <= \
        set(rep.torch_ops), rep.torch_ops
    assert rep.torch_ops["aten::round_.default"] == 256


def check_an_index_read_with_item_is_read_on_the_replays_values_and_carried_to_the_launch_it_feeds():
    def make(s):
        return torch.randn(4, 32, generator=torch.Generator().manual_seed(s)), torch.tensor(s % 4)
    rep, outs, want = _replay("item_index", make)
    assert rep.stale_reads == ["_local_scalar_dense read 2 on the replay's inputs where the call recorded 1"]
    assert rep.carried == {1: 2}
    torch.testing.assert_close(outs[0], want)  # the launch's row argument took the replay's read


def check_a_read_carried_into_the_grid_is_bounded_as_a_recorded_grid_is():
    mod, kernels = _load("grid_from_read")
    trace = _record(mod, (torch.tensor(8),))
    torch.testing.assert_close(Replayer(trace, "cpu", kernels).run((torch.tensor(8),))[0],
                               torch.arange(8.0).repeat_interleave(16))
    with pytest.raises(ReplayError, match=r"grid \(4294967296, 1, 1\) out of range"):
        Replayer(trace, "cpu", kernels).run((torch.tensor(2**32),))


def check_a_flag_computed_from_a_read_is_not_carried_and_the_replay_notes_the_stale_read():
    def make(s):
        return (_vec(s).reshape(2, 128) + (100.0 if s == 2 else 0.0),)
    mod, kernels = _load("flag_from_read")
    trace = _record(mod, make(1))
    rep = Replayer(trace, "cpu", kernels)
    outs = rep.run(make(2))
    assert rep.carried == {} and rep.stale_reads, rep.stale_reads  # a float read; the flag derived from it stays
    assert not torch.allclose(outs[0], torch.softmax(make(2)[0], dim=1), equal_nan=True)


def check_scratch_memory_is_the_replays_own_kept_across_calls_and_scrambled_before_every_pass():
    mod, kernels = _load("scratch_memo")
    x = _vec(3)
    trace = _record(mod, (x,))
    rep = Replayer(trace, "cpu", kernels)
    torch.testing.assert_close(rep.run((x.clone(),))[0], x * 2.0)
    (table,) = rep.scratch()
    assert table.numel() == 257 * 4
    # the memo would hit now: the table holds this input's fingerprint and answer
    side = TimedSide(lambda *a: rep.run(a), [(x.clone(),)], scratch=rep.scratch)
    before = table.clone()
    side.calibrate()  # every untimed call's outputs and the scratch scrambled before the memory is used again
    assert not torch.equal(table, before)
    side.prepare(1, graph=False)
    side.trial(0, passes=2)
    assert not torch.equal(table[:4], before[:4])


def _program_changes(name, make, why):
    mod, _ = _load(name)
    calls = [({"shape": {"N": 256}, "dtype": "float32", "seed": s, "variant": "scaled" if s % 2 else ""},
              _record(mod, make(s))) for s in range(4)]
    problem = program_problem(calls, constexpr_params((HERE / f"{name}.py").read_text()))
    assert "the call's program changes between calls of shape {'N': 256} float32" in problem, problem
    assert why in problem, problem


def check_input_sniffing_is_a_program_that_changes_between_calls():
    _program_changes("sniffing", lambda s: (_vec(s) * (16.0 if s % 2 else 1.0),), "'STEP': 1}")


def check_call_counting_is_a_program_that_changes_between_calls():
    _program_changes("call_counting", lambda s: (_vec(s),), "_copy on grid (2,)")  # BLOCK=128 from the third call


def check_an_honest_calls_program_is_the_same_on_every_draw_of_its_shape():
    mod, _ = _load("aten_outside_table")
    calls = [({"shape": {"M": 4}, "dtype": "float32", "seed": s},
              _record(mod, (torch.randn(4, 64, generator=torch.Generator().manual_seed(s)) * (1 + 15 * (s % 2)),)))
             for s in range(4)]
    assert program_problem(calls) == ""


def check_aten_names_resolve_only_to_aten_ops_and_ops_beyond_tensor_values_are_the_replays_limit():
    assert resolve("logsumexp", "default").key == "aten::logsumexp.default"
    assert resolve("round_", "default").written_args == ("self",)
    for name, overload in (("__class__", "default"), ("logsumexp", "__call__"), ("no_such_op", "default"),
                           ("_reshape_alias", "softmax"), (3, "default")):
        with pytest.raises(AtenRefused) as e:
            resolve(name, overload)
        assert not e.value.limit
    with pytest.raises(AtenRefused) as e:
        resolve("set_", "source_Storage")
    assert e.value.limit


def check_an_op_beyond_tensor_values_fails_the_replay_as_not_replayable():
    x = torch.zeros(4)
    trace = {"events": [{"kind": "op", "ns": "aten", "name": "record_stream", "overload": "default",
                         "args": [{"__t__": {"t": 0, "off": 0, "size": [4], "stride": [1], "dtype": "float32"}}, None],
                         "kwargs": {"__d__": {}}, "out": None}],
             "buffers": [{"from": "input", "index": 0, "nbytes": 16}], "kernels": {}, "snapshots": {},
             "outputs": [{"__t__": {"t": 0, "off": 0, "size": [4], "stride": [1], "dtype": "float32"}}]}
    with pytest.raises(NotReplayable, match="not replayable: aten::record_stream.default acts on more than"):
        Replayer(trace, "cpu", {}, inplace=(0,)).run((x,))


def main() -> None:
    found = {}
    for name, fn in list(globals().items()):
        if name.startswith("check_") and callable(fn):
            try:
                fn()
                found[name] = "ok"
            except BaseException:  # noqa: BLE001 - reported to the test, which fails naming it
                found[name] = traceback.format_exc()[-3000:]
    print(json.dumps(found))


if __name__ == "__main__":
    main()
