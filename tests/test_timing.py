"""One side of a GPU timing (fitness.timing): what a timed region does when the call cannot be captured."""
import pytest
import torch

from fitness.timing import TimedSide


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
    first, again = side.check([0, 2]), side.check([0, 2])
    assert torch.equal(first[0][0], again[0][0])  # each checked call starts from the same seed
    assert torch.randn(4, device="cuda").isfinite().all()  # the process's generator is usable after the failed capture
