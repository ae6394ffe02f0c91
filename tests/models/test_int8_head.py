"""8-bit grids (treespec.models.quantize.int8_grid, Int8Linear): a Q8_0-style weight found exactly, multiplied on
treespec's 8-bit kernel (int8 activations) or as two 4-bit planes (bf16 activations), row by row the same whatever the
other rows; a 4-bit target's Q8_0 head held so, and the target still decodes as itself in either form."""

from __future__ import annotations

import pytest
import torch
from conftest import PROMPTS, all_policies, reference, tiny_model
from test_int4_cpu import _int8_rounded
from test_quantize import snapped

import treespec
from treespec.models import int4_cpu
from treespec.models.quantize import INT8_ACTIVATIONS, Int8Linear, int8_grid, quantize_target_weights, set_activations

pytestmark = pytest.mark.skipif(int4_cpu.kernel_unavailable() is not None,
                                reason=f"treespec's CPU kernels cannot run here: {int4_cpu.kernel_unavailable()}")


def q8_0(weight: torch.Tensor) -> torch.Tensor:
    """weight [O, I] rounded as a Q8_0 GGUF tensor is: an fp16 scale per 32 inputs, codes round(w / d) in -127..127."""
    rows, cols = weight.shape
    grouped = weight.float().reshape(rows, cols // 32, 32)
    scale = (grouped.abs().amax(-1, keepdim=True) / 127).half().float()
    return (torch.round(grouped / scale).clamp(-127, 127) * scale).reshape(rows, cols)


def test_an_8_bit_grid_is_found_exactly_and_nothing_else_is():
    weight = q8_0(torch.randn(48, 96, generator=torch.Generator().manual_seed(0)))
    codes, scale = int8_grid(weight)
    assert torch.equal(codes.float().reshape(48, 3, 32) * scale[..., None], weight.reshape(48, 3, 32))
    assert int8_grid(torch.randn(48, 96)) is None
    assert int8_grid(torch.randn(48, 40)) is None  # inputs not in groups of 32


@pytest.mark.parametrize("activations", ["bf16", "int8"])
def test_an_8_bit_layer_multiplies_by_its_weight_and_rows_do_not_depend_on_each_other(activations):
    if activations == "int8" and int4_cpu.int8_unavailable() is not None:
        pytest.skip(f"no int8 activations here: {int4_cpu.int8_unavailable()}")
    generator = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(128, 40, bias=True)
    with torch.no_grad():
        linear.weight.copy_(q8_0(torch.randn(40, 128, generator=generator)))
    layer = Int8Linear.from_linear(linear)
    set_activations(layer, activations)
    assert layer.activations == activations and layer.codes.shape == (3, 4, 512)
    x = torch.randn(7, 128, generator=generator)
    rounded = x.bfloat16().double() if activations == "bf16" else _int8_rounded(x)
    exact = rounded @ linear.weight.double().T + linear.bias.double()
    out = layer(x)
    assert out.shape == (7, 40) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), exact, atol=1e-4, rtol=1e-5)
    assert all(torch.equal(layer(x[i:i + 1])[0], out[i]) for i in range(7))
    codes, scale = layer.grid()
    assert torch.equal(codes.double().reshape(40, 4, 32) * scale.double()[..., None],
                       linear.weight.double().reshape(40, 4, 32))
    reads = sum(t.numel() * t.element_size() for t in layer.product_tensors())
    assert reads == (48 * 128 + 48 * 4 * 2 + 40 * 4 if activations == "int8" else 2 * (48 * 64 + 2 * 48 * 4 * 2) + 40 * 4)


@pytest.mark.parametrize("scheme", ["int4", INT8_ACTIVATIONS])
def test_a_4_bit_targets_q8_0_head_is_held_in_8_bits_and_the_target_decodes_as_itself(scheme):
    if scheme == INT8_ACTIVATIONS and int4_cpu.int8_unavailable() is not None:
        pytest.skip(f"no int8 activations here: {int4_cpu.int8_unavailable()}")
    target = snapped(tiny_model("llama", seed=0, hidden=64, vocab=64))
    with torch.no_grad():
        target.lm_head.weight = torch.nn.Parameter(q8_0(target.lm_head.weight.detach()))
    target = quantize_target_weights(target, scheme)
    assert isinstance(target.get_output_embeddings(), Int8Linear)
    assert target.get_output_embeddings().activations == ("int8" if scheme == INT8_ACTIVATIONS else "bf16")
    draft = quantize_target_weights(snapped(tiny_model("llama", seed=1, layers=1, hidden=64, vocab=64)), "int4")
    for prompt in PROMPTS[:2]:
        expected = reference(target, prompt, 12)
        for name, tree in all_policies().items():
            assert treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=12).tokens == expected, name


@pytest.mark.parametrize("activations", ["bf16", "int8"])
def test_rows_of_an_int8_layer_are_its_rows(activations):
    """Int8Linear.rows (a vocabulary-subset head over the target's 8-bit LM head, as Medusa heads use it): the same
    outputs on the kept rows, in the same form; the codes come back from the kernel's layout."""
    if activations == "int8" and int4_cpu.int8_unavailable() is not None:
        pytest.skip(f"no int8 activations here: {int4_cpu.int8_unavailable()}")
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=False)
    with torch.no_grad():
        grouped = linear.weight.reshape(48, 2, 32)
        scale = grouped.abs().amax(-1, keepdim=True) / 127
        linear.weight.copy_((torch.round(grouped / scale) * scale).reshape(48, 64))
    layer = set_activations(Int8Linear.from_linear(linear), activations)
    index = torch.tensor([3, 17, 40, 5])
    x = torch.randn(2, 64)
    assert layer.rows(index).activations == activations
    assert torch.equal(layer.rows(index)(x), layer(x)[:, index])
    from transformers import LlamaConfig

    from treespec.drafters.vocab import SubsetHead

    subset = SubsetHead(layer, LlamaConfig(), index)  # what Medusa heads build over such a head
    logits = subset(x)
    torch.testing.assert_close(logits[:, index], layer(x)[:, index])
    assert torch.isinf(logits).sum() == 2 * (48 - 4)
