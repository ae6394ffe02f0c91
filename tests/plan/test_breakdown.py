"""Where a target pass's time goes: categories that add up to the pass, 4-bit products named as such."""

import pytest
import torch
from conftest import tiny_model

from treespec.models.quantize import dequantize_int4, int4_available, quantize_int4, quantize_target_weights
from treespec.plan.breakdown import CATEGORIES, REST, category, pass_breakdown


def test_operators_fall_into_their_categories():
    assert category("aten::_weight_int4pack_mm_for_cpu") == "quantized products"
    assert category("treespec_int4_matmul") == "quantized products"  # treespec's kernel, a named profiler range
    assert category("treespec_int6_matmul") == "quantized products"
    assert category("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert category("mkldnn::_linear_pointwise") == "dense products" and category("aten::addmm") == "dense products"
    assert category("aten::mul") == REST


def test_a_dense_pass_adds_up_and_its_head_is_counted_apart():
    model = tiny_model("llama", layers=2, hidden=64, vocab=512)
    breakdown = pass_breakdown(model, 4, prefix_len=16, repeats=3, warmup=1)
    assert set(breakdown.ms) == set(CATEGORIES) and breakdown.tokens == 4 and breakdown.prefix_len == 16
    assert sum(breakdown.ms.values()) == pytest.approx(breakdown.wall_ms)
    assert breakdown.ms["quantized products"] == 0 and breakdown.ms["dense products"] > 0
    assert breakdown.ms["LM head"] > 0 and breakdown.ms["attention"] > 0
    assert sum(breakdown.shares().values()) == pytest.approx(1.0)
    assert breakdown.operators > 10 and "4-token pass" in breakdown.line()


@pytest.mark.skipif(not int4_available(), reason="torch has no CPU int4 kernel here")
def test_a_4_bit_target_spends_its_products_in_the_4_bit_kernel():
    model = tiny_model("llama", layers=2, hidden=64, vocab=512)
    with torch.no_grad():  # every linear weight on a 4-bit grid, as a Q4 GGUF's are when loaded
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.copy_(dequantize_int4(*quantize_int4(module.weight)))
    model = quantize_target_weights(model, "int4")
    breakdown = pass_breakdown(model, 1, prefix_len=16, repeats=3, warmup=1)
    assert breakdown.ms["quantized products"] > 0


def test_a_model_off_the_lean_decoder_is_refused():
    with pytest.raises(ValueError, match="lean"):
        pass_breakdown(tiny_model("gpt2"), 1, prefix_len=4, repeats=1, warmup=0)
