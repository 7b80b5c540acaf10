"""One side of a GPU timing (fitness.clean.timing): what a timed region does when the call cannot be captured."""
import pytest
import torch

from fitness.clean.timing import TimedSide


def _uncapturable_with_random_draws(x: torch.Tensor) -> torch.Tensor:
    noise = torch.randn_like(x)  # a wrapper that draws random numbers itself
    if float(x.sum()) > 1e30:  # a host sync: not allowed inside a CUDA graph capture
        return x
    return x + noise


@pytest.mark.gpu
def test_a_call_that_cannot_be_captured_is_timed_eagerly_and_its_random_draws_still_work():
    draws = [(torch.rand(1024, device="cuda"),) for _ in range(3)]
    side = TimedSide(_uncapturable_with_random_draws, draws)
    side.calibrate()
    assert side.prepare(4, graph=True) == "eager"
    assert side.uncapturable
    assert side.trial(0) > 0 and side.trial(1) > 0
    side.trial(2, picks=[0, 2])
    first = side.checked()
    side.trial(2, picks=[0, 2])
    again = side.checked()
    assert torch.equal(first[0][0], again[0][0])  # every pass starts from the same seed
    assert torch.randn(4, device="cuda").isfinite().all()  # the process's generator is usable after the failed capture


def _tuple_with_non_tensors(x: torch.Tensor) -> tuple:
    return x * 2, None, 3, (x + 1,)


class _ViewOfInput(torch.autograd.Function):
    """Returns its input as a view, as TritonBench fast_rms_layernorm's Function does."""

    @staticmethod
    def forward(ctx, x):
        return x.view(-1)

    @staticmethod
    def backward(ctx, grad):
        return grad


@pytest.mark.gpu
@pytest.mark.parametrize("graph", [True, False], ids=["cuda-graph", "eager"])
def test_the_checked_outputs_are_the_call_s_tensors_flattened_as_a_recorded_trace_gives_them(graph):
    draws = [(torch.rand(256, device="cuda"),) for _ in range(3)]
    side = TimedSide(_tuple_with_non_tensors, draws)
    side.calibrate()
    side.prepare(2, graph)
    side.trial(1, picks=[1])  # set 1 holds draw (1 + 1) % 3
    (out,) = side.checked()
    expected = draws[2][0].cpu()
    assert len(out) == 2 and torch.equal(out[0], expected * 2) and torch.equal(out[1], expected + 1)


@pytest.mark.gpu
def test_an_output_that_is_an_autograd_view_of_an_input_can_be_refilled_and_checked():
    draws = [(torch.rand(16, 16, device="cuda", requires_grad=True),) for _ in range(3)]
    side = TimedSide(_ViewOfInput.apply, draws)
    side.calibrate()
    side.prepare(2, graph=True)
    side.trial(0)
    side.trial(2, picks=[0])  # set 0 holds draw 2; the output, a view of it, is never scrambled
    (out,) = side.checked()
    assert torch.equal(out[0], draws[2][0].detach().cpu().view(-1))


class _CountingSide:
    """A stand-in for a prepared TimedSide: which draws' regions ran, and how long the last took."""

    def __init__(self, region_ms):
        self.region_ms, self.ran = region_ms, []

    def n_draws(self) -> int:
        return 9

    def trial(self, rot: int, passes: int = 1, picks: list | None = None, fresh: int | None = None) -> float:
        self.ran.append(rot)
        return 0.001


@pytest.mark.parametrize("region_ms, ran", [(None, [5, 4, 5, 6]), (0.2, [5, 4, 5, 6]), (5.0, [4, 5, 6])],
                         ids=["unknown", "short", "long"])
def test_a_request_of_short_regions_runs_one_untimed_on_the_other_draw_first(region_ms, ran):
    from fitness.clean.child_timing import PreparedSides
    from fitness.common.messages import Trial
    sides = PreparedSides()
    sides.side = _CountingSide(region_ms)
    reply = sides.trial(Trial(k=0, passes=1, reps=3, rots=(4, 5, 6)))
    assert sides.side.ran == ran and len(reply["ms"]) == 3  # the untimed region's time is not reported


def test_an_expanded_input_is_refilled_whole_and_a_plain_one_element_by_element():
    """TritonBench multinomial_sampling passes `arange(n).expand(b, n)`: a stride of 0, which
    torch refuses to write element by element ('more than one element ... refers to a single
    memory location'); the sets keep that layout (to_device), so it takes the draw's memory whole."""
    from fitness.clean.timing import _fill
    from suites.task import to_device

    def draw(k):
        return (torch.arange(8).add(k).expand(4, 8), torch.full((4, 8), float(k)))

    sets = [to_device(draw(0), "cpu") for _ in range(2)]
    assert sets[0][0].stride() == (0, 1)
    _fill(sets, draw(3))
    for indices, scores in sets:
        assert indices.stride() == (0, 1) and torch.equal(indices, draw(3)[0]) and torch.equal(scores, draw(3)[1])
