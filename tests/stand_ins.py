"""What the tests' stand-in children share: ask() over a fake's request(), as ChildProcess.ask is
over the real child's (fitness.engine.forked_child): the typed request sent as its wire dict, the
reply read as the engine reads it, a malformed one failing as the real child's does."""
from fitness.common.messages import Reply
from fitness.engine.forked_child import WorkerFailure


class Asks:
    """ChildProcess.ask (WorkerPool.ask, with `cancel`) over the fake's request(dict)."""

    def ask(self, req, timeout_s, cancel=None):
        wire = req.to_wire()
        answer = self.request(wire, timeout_s) if cancel is None else self.request(wire, timeout_s, cancel)
        reply = Reply.from_wire(answer, req.answer())
        if reply.malformed:
            raise WorkerFailure(f"{reply.error}; child killed")
        return reply
