"""fitness/common/messages.py: the typed requests give the very dicts the engine sent, the child
reads them back, and a reply whose fields have the wrong type is a failure that names the field."""
import os
import shutil
import socket
import tempfile
import threading

import pytest
import torch

from fitness.common import messages as m
from fitness.common import replies as r
from fitness.common.messages import BadMessage, Ready, Reply, parse_request
from fitness.process import protocol

TASK = {"suite": "builtin", "name": "softmax", "path": None}
CASE = {"split": "tuning", "shape": {"M": 4, "N": 8}, "dtype": "float32", "seed": 7}
TRACE = {"buffers": [{"from": "input", "index": 0}], "events": [], "outputs": [{"__t__": {"t": 0}}]}

# each op's dict as the engine sends it (fitness.engine: correctness, replay, script_eval, measuring,
# trials, turn_state, pool, reference_service), in the order of its keys
SENT = [
    {"op": "import", "source": "def softmax(x):\n    return x\n", "task": TASK},
    {"op": "case", "task": TASK, "case": CASE},
    {"op": "replay", "task": TASK, "items": [{"case": CASE, "trace": TRACE}], "source": None},
    {"op": "script", "reference": True, "task": TASK, "cases": [CASE, CASE], "count": True},
    {"op": "script", "reference": True, "task": TASK, "cases": [CASE], "count": False, "guard": True, "keep": False},
    {"op": "time_prepare", "task": TASK, "case": CASE, "seeds": [1, 2, 3], "slot": 0, "trace": TRACE},
    {"op": "time_prepare", "task": TASK, "case": CASE, "seeds": [1, 2, 3], "slot": "epoch3",
     "baseline_source": None, "keep_share": 0.15},
    {"op": "time_open", "slot": "epoch3"},
    {"op": "time_sets", "slot": 1, "n_sets": 12, "graph": False},
    {"op": "trial", "k": 0, "passes": 2, "reps": 3, "warm": True, "rots": [4, 5, 6]},
    {"op": "trial", "k": 3, "passes": 2, "reps": 2, "rots": [1, 0], "fresh": [11, None],
     "check": {"rep": 1, "picks": [0, 5, 11]}},
    {"op": "time_check", "slot": 0},
    {"op": "time_oracle", "picks": [0, 5, 11], "rot": 2, "slot": "epoch3"},
    {"op": "peaks"},
    {"op": "warm"},
    {"op": "ref_prefetch", "task": TASK, "case": CASE, "cache_bytes": 1 << 30},
    {"op": "ref_check", "outputs": [torch.arange(6.0).reshape(2, 3)], "task": TASK, "case": CASE,
     "cache_bytes": 1 << 30},
]


def _same(a, b) -> bool:
    """Equal dicts, in the same key order, tensors compared by value."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_every_op_the_engine_sends_has_a_request_type_with_its_op_and_reply_payload():
    assert {d["op"] for d in SENT} == set(m.REQUESTS)
    for op, kind in m.REQUESTS.items():
        assert kind.op == op and issubclass(kind.answer(), r.Payload)


@pytest.mark.parametrize("sent", SENT, ids=[f"{d['op']}-{i}" for i, d in enumerate(SENT)])
def test_a_request_parsed_by_the_child_gives_back_the_very_dict_the_engine_sent(sent):
    req = parse_request(sent)
    assert type(req) is m.REQUESTS[sent["op"]]
    assert _same(req.to_wire(), sent)


@pytest.mark.parametrize("sent", SENT, ids=[f"{d['op']}-{i}" for i, d in enumerate(SENT)])
def test_a_request_crosses_the_real_protocol_and_arrives_as_the_same_record(sent):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        req = parse_request(sent)
        protocol.send(a.fileno(), {**req.to_wire(), "nonce": "abc"})  # as ChildProcess.request sends it
        got = protocol.recv(b.fileno())
    finally:
        a.close()
        b.close()
    assert got.pop("nonce") == "abc" and _same(got, sent)
    assert _same(parse_request(got).to_wire(), req.to_wire())


def test_typed_fields_read_as_records_and_tuples():
    trial = parse_request(SENT[10])
    assert trial == m.Trial(k=3, passes=2, reps=2, rots=(1, 0), fresh=(11, None),
                            check=m.TrialCheck(rep=1, picks=(0, 5, 11)))
    replay = parse_request(SENT[2])
    assert isinstance(replay, m.Replay) and replay.items[0].trace == TRACE and replay.items[0].case == CASE


@pytest.mark.parametrize("sent, names", [
    ({"op": "time_sets", "slot": 1, "n_sets": "12"}, "'n_sets' is a str, not int"),
    ({"op": "time_sets", "slot": 1, "n_sets": True}, "'n_sets' is a bool, not int"),
    ({"op": "trial", "k": 0, "reps": 1, "rots": [1, "2"]}, "'rots[1]' is a str"),
    ({"op": "trial", "k": 0, "reps": 1, "rots": [1], "check": {"rep": 0}}, "check: TrialCheck has no 'picks'"),
    ({"op": "case", "task": TASK}, "RunCase has no 'case'"),
    ({"op": "warm", "device": "cuda"}, "unknown field(s) device"),
    ({"op": "time_open", "slot": [0]}, "'slot' is a list"),
])
def test_a_malformed_request_is_refused_naming_the_field(sent, names):
    with pytest.raises(BadMessage, match="malformed") as e:
        parse_request(sent)
    assert names in str(e.value)


def test_the_child_answers_a_malformed_request_with_an_error_as_it_answers_an_unknown_op():
    from fitness.candidate.harness import LaunchHook, Snapshot
    from fitness.process.child import Child

    hook = LaunchHook()
    child = Child(hook, Snapshot(hook))
    try:
        assert child.handle({"op": "no_such_op"}) == {"error": "unknown op 'no_such_op'"}
        assert child.handle({"op": "time_open", "slot": None}) == {
            "error": "malformed time_open request: 'slot' is a NoneType, not int | str"}
        assert child.handle({"op": "time_open", "slot": 3, "nonce": "ab"}) == {"missing": True}
    finally:
        shutil.rmtree(child.tmp)


def test_a_reply_is_read_with_its_envelope_and_its_payload_typed():
    reply = Reply.from_wire({"problem": "", "ms": {"compare": 1.5}, "nonce": "ab", "phase_ms": {"handle": 2.0}},
                            r.RefChecked)
    assert reply == Reply(r.RefChecked(problem="", ms={"compare": 1.5}), nonce="ab", phase_ms={"handle": 2.0})
    failed = Reply.from_wire({"error": "boom", "stage": "compile", "fatal": True}, r.Trialled)
    assert (failed.payload, failed.error, failed.stage, failed.fatal, failed.malformed) == \
        (None, "boom", "compile", True, False)  # an error's payload is not read


@pytest.mark.parametrize("wire, answer, names", [
    ({"fatal": "yes"}, r.Nothing, "'fatal' is a str, not bool"),
    ({"error": 3}, r.Nothing, "'error' is an int"),
    ({"phase_ms": {"handle": "fast"}}, r.Nothing, "phase_ms['handle']"),
    ({"problem": None}, r.RefChecked, "'problem' is a NoneType, not str"),
    ({"ms": [1.0, "2"]}, r.Trialled, "'ms[1]' is a str"),
    ({"results": [{"outputs": ["not a tensor"]}]}, r.Replayed, "results[0]: 'outputs[0]' is a str"),
    ({"missing": False, "cal": {"t_one_ms": 1.0}}, r.Opened, "cal: Prepared has no 'in_bytes'"),
    ({"t_one_ms": 1.0, "in_bytes": 4, "l2_bytes": 8, "cost": [1.0]}, r.Prepared, "'cost' is a list"),
    (["not", "a", "dict"], r.Nothing, "is a list, not a dict"),
])
def test_a_reply_with_a_field_of_the_wrong_type_is_a_fatal_failure_naming_it(wire, answer, names):
    reply = Reply.from_wire(wire, answer)
    assert reply.malformed and reply.fatal and reply.payload is None
    assert reply.error.startswith("the child's reply is malformed") and names in reply.error


def test_the_engine_kills_a_child_whose_reply_has_a_field_of_the_wrong_type():
    """ChildProcess over a real socket, a thread in the child's place answering with the right nonce."""
    from fitness.engine.forked_child import ChildProcess, WorkerFailure

    def child_side(conn: socket.socket, reply: dict) -> None:
        req = protocol.recv(conn.fileno())
        protocol.send(conn.fileno(), {**reply, "nonce": req["nonce"]})

    for reply, ask in (({"ms": ["1.0"]}, True), ({"fatal": "no"}, False), ({"ms": [0.5, 0.25]}, True)):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child = ChildProcess(ours, tempfile.TemporaryFile(), os.getpid(), 1 << 45)
        other = threading.Thread(target=child_side, args=(theirs, reply))
        other.start()
        req = m.Trial(k=0, reps=2, rots=(0, 1))
        try:
            if reply == {"ms": [0.5, 0.25]}:  # a well-formed one is read, typed
                assert child.ask(req, 10).payload == r.Trialled(ms=(0.5, 0.25)) and not child.dead
                continue
            with pytest.raises(WorkerFailure, match="malformed.*child killed"):
                child.ask(req, 10) if ask else child.request(req.to_wire(), 10)
            assert child.dead
        finally:
            other.join()
            theirs.close()
            child.kill()
            child.log.close()


def test_the_child_s_greeting_round_trips_and_a_wrong_one_is_refused():
    ready = Ready(pid=1234, device="cpu", how="bubblewrap")
    assert ready.to_wire() == {"op": "ready", "pid": 1234, "device": "cpu", "how": "bubblewrap"}
    assert Ready.from_wire(ready.to_wire()) == ready
    with pytest.raises(BadMessage, match="'pid' is a str"):
        Ready.from_wire({"op": "ready", "pid": "1234", "device": "cpu", "how": "x"})
    with pytest.raises(BadMessage, match="greeting"):
        Ready.from_wire({"pid": 1234, "device": "cpu", "how": "x"})
