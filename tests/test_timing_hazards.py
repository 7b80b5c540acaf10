"""fitness/engine/timing_hazards.py: what in a baseline's source makes its call time unlike the replay of
its kernels, named from the source alone."""
from fitness.engine.timing_hazards import timing_hazards

PRINTING = '''
import torch, triton, triton.language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    print("inside a kernel is the device's own printf, not the host's")

def wrapper(x):
    k[(1,)](x, x.numel(), BLOCK=128)
    print(f"loss: {x}")
    return x
'''

TUNED_ON_NOTHING = '''
import triton, triton.language as tl

@triton.autotune(configs=[triton.Config({'BT': 16}), triton.Config({'BT': 64})], key=[])
@triton.jit
def cumsum_kernel(s, o, T: tl.constexpr, BT: tl.constexpr):
    pass

@triton.autotune([triton.Config({'BT': 16}), triton.Config({'BT': 64})], ['T'])
@triton.jit
def keyed_kernel(s, o, T, BT: tl.constexpr):
    pass

@triton.autotune(configs=[triton.Config({'BT': 16})], key=[])
@triton.jit
def one_config_kernel(s, o, T, BT: tl.constexpr):
    pass
'''


def test_a_print_in_the_wrapper_is_named_with_its_line_and_one_in_a_kernel_is_not():
    assert timing_hazards(PRINTING) == ["it prints inside wrapper (line 10)"]


def test_an_autotuner_keyed_on_nothing_over_several_configs_is_named_and_a_keyed_one_is_not():
    hazards = timing_hazards(TUNED_ON_NOTHING)
    assert len(hazards) == 1 and hazards[0].startswith("it autotunes cumsum_kernel with key=[] (line 6)")


def test_an_autotuner_keyed_on_the_shape_is_named_with_its_configs_only_when_nothing_more_specific_is():
    keyed = TUNED_ON_NOTHING.replace("key=[])", "key=['T'])")  # cumsum_kernel keyed now, over 2 configs
    hazards = timing_hazards(keyed)
    assert len(hazards) == 1 and hazards[0].startswith("it autotunes cumsum_kernel over 2 configs (line 6)")
    assert "two processes of the same code can pick differently" in hazards[0]
    assert timing_hazards(keyed.replace("[triton.Config({'BT': 16}), triton.Config({'BT': 64})]", "CONFIGS")) == \
        ["it autotunes cumsum_kernel over several configs (line 6): " + hazards[0].split(": ", 1)[1]]
    assert timing_hazards(PRINTING + keyed) == ["it prints inside wrapper (line 10)"]


def test_a_wrapper_that_waits_for_the_device_is_named_and_plain_code_or_bad_source_names_nothing():
    waits = "def f(x):\n    n = x.sum().item()\n    return x * n\n"
    assert timing_hazards(waits) == ["it waits for the GPU inside f (line 2: .item())"]
    assert timing_hazards("def f(x):\n    return x + 1\n") == []
    assert timing_hazards("def f(:\n") == []
