"""The lean decoder (treespec.lean_decoder): the same hidden states as transformers' modules over a tree pass, the
drafter's logits with and without it, joined 4-bit products, its cache per model, and greedy parity."""

from __future__ import annotations

import pytest
import torch
from conftest import OneRow, reference, tiny_model
from transformers import LlamaConfig, LlamaForCausalLM

import treespec
from treespec import policies
from treespec.decode import engine
from treespec.decode.cache import new_cache
from treespec.decode.mask import additive
from treespec.drafters import CausalLMDrafter
from treespec.models import attention
from treespec.models.layouts import set_linear_layout
from treespec.models.lean import LeanDecoder, lean_decoder, lean_unsupported
from treespec.models.quantize import Int4Linear, concat_int4, int4_available, quantize_draft_weights

needs_int4 = pytest.mark.skipif(not int4_available(), reason="this torch build has no CPU int4 kernel")


def _tree_pass_inputs(prefix: int, n: int, seed: int = 0):
    """A causal prefill of `prefix` tokens, then n tree nodes that each see the prefix, themselves and a random
    subset of the nodes before them; positions prefix + depth."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 64, (prefix,), generator=gen)
    nodes = torch.randint(0, 64, (n,), generator=gen)
    visible = torch.zeros(n, prefix + n, dtype=torch.bool)
    visible[:, :prefix] = True
    visible[:, prefix:] = (torch.rand(n, n, generator=gen) < 0.5).tril()
    visible[:, prefix:] |= torch.eye(n, dtype=torch.bool)
    positions = prefix + visible[:, prefix:].sum(-1) - 1
    return prompt, nodes, visible, positions


def _hidden_both_ways(model, dtype, ways=(False, True)):
    prompt, nodes, visible, positions = _tree_pass_inputs(7, 5)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    out = []
    with torch.inference_mode():
        for lean in ways:
            cache = new_cache(model, 32)
            for ids, pos, vis in ((prompt, torch.arange(7), causal), (nodes, positions, visible)):
                mask = additive(vis, dtype)
                if lean:
                    hidden = LeanDecoder(model)(ids[None], pos[None], mask, cache)[0][0]
                else:
                    hidden = model.model(input_ids=ids[None], position_ids=pos[None], attention_mask=mask,
                                         cache=cache, use_cache=True).last_hidden_state[0]
            out.append(hidden)
    return out


def _llama_variant(**config) -> LlamaForCausalLM:
    """A tiny Llama with config options the lean pass must follow through the model's own modules."""
    torch.manual_seed(9)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                         bos_token_id=None, eos_token_id=None, pad_token_id=None, **config))
    model.set_attn_implementation("treespec_sdpa")
    return model.eval()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hidden_states_are_transformers_own_over_a_tree_pass(arch, dtype):
    """With treespec_sdpa the same operations in the same order: equal, not just close."""
    model = tiny_model(arch, seed=3, hidden=64).to(dtype)
    expected, got = _hidden_both_ways(model, dtype)
    assert got.shape == (5, 64) and got.dtype == dtype
    assert torch.equal(got, expected)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_hidden_states_match_stock_sdpa_and_eager(arch):
    """transformers' own attention paths (the cache copied per query head) agree up to float rounding."""
    lean = _hidden_both_ways(tiny_model(arch, seed=3, hidden=64), torch.float32)[1]
    for attn in ("sdpa", "eager"):
        expected = _hidden_both_ways(tiny_model(arch, seed=3, hidden=64, attn=attn), torch.float32, ways=(False,))[0]
        torch.testing.assert_close(lean, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("config", [
    dict(head_dim=32),  # wider heads than hidden / heads
    dict(attention_bias=True, mlp_bias=True),
    dict(rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=8)),
])
def test_hidden_states_follow_the_configs_options(config):
    model = _llama_variant(**config)
    expected, got = _hidden_both_ways(model, torch.float32)
    assert torch.equal(got, expected)


@needs_int4
def test_hidden_states_equal_transformers_with_joined_4_bit_products():
    model = quantize_draft_weights(tiny_model("qwen2", seed=4, hidden=128), "int4").to(torch.bfloat16)
    decoder = LeanDecoder(model)
    assert all(len(joined.parts) == 1 and isinstance(joined.parts[0], Int4Linear)
               for layer in decoder.layers for joined in (layer.qkv, layer.gate_up))
    expected, got = _hidden_both_ways(model, torch.bfloat16)
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=1e-2)


@needs_int4
def test_joined_4_bit_products_equal_the_parts():
    torch.manual_seed(0)
    parts = [Int4Linear.from_linear(torch.nn.Linear(64, rows, bias=bias), keep_codes=False)
             for rows, bias in ((128, True), (64, False), (40, True))]
    joined = concat_int4(parts)
    assert joined is not None and joined.out_features == 232
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    assert torch.equal(joined(x), torch.cat([p(x) for p in parts], -1))
    padded_first = [parts[2], parts[0]]  # padded rows in the middle would shift the rows after them
    assert concat_int4(padded_first) is None
    assert concat_int4([parts[0], Int4Linear.from_linear(torch.nn.Linear(96, 64))]) is None  # other input size
    # 80 rows in the middle: not a whole number of the kernel's row blocks on some CPUs; joined only if it gives
    # the same products (the probe decides)
    uneven = [Int4Linear.from_linear(torch.nn.Linear(64, 80), keep_codes=False), parts[0]]
    joined = concat_int4(uneven)
    assert joined is None or torch.equal(joined(x), torch.cat([p(x) for p in uneven], -1))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_drafter_logits_are_the_same_with_the_lean_decoder(arch):
    draft = tiny_model(arch, seed=5, hidden=64)
    vocab = torch.tensor([0, 3, 4, 10, 17, 40, 63])
    for subset in (None, vocab):
        slow, lean = OneRow(CausalLMDrafter(draft, 64, subset, lean=False)), OneRow(CausalLMDrafter(draft, 64, subset))
        assert slow.drafter.lean is None and lean.drafter.lean is not None
        with torch.inference_mode():
            for d in (slow, lean):
                d.reset([3, 17, 5, 9])
            torch.testing.assert_close(lean.root_logits(9), slow.root_logits(9), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(lean.node_logits([1, 2], [4, 10], [0, 0]),
                                       slow.node_logits([1, 2], [4, 10], [0, 0]), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(lean.node_logits([3], [7], [2]), slow.node_logits([3], [7], [2]),
                                       atol=1e-5, rtol=1e-5)


def test_other_models_run_through_transformers():
    gpt2 = tiny_model("gpt2", seed=0)
    assert "gpt2" in lean_unsupported(gpt2)
    assert lean_decoder(gpt2) is None and CausalLMDrafter(gpt2, 32).lean is None
    with pytest.raises(ValueError, match="cannot run"):
        LeanDecoder(gpt2)
    training = tiny_model("llama", seed=0).train()
    assert "training" in lean_unsupported(training)
    hooked = tiny_model("llama", seed=0)
    hooked.model.layers[1].mlp.register_forward_hook(lambda *args: None)
    assert "hooks" in lean_unsupported(hooked)
    truncated = tiny_model("llama", seed=0, layers=2)
    truncated.model.layers = truncated.model.layers[:1]
    assert "layers" in lean_unsupported(truncated)


@needs_int4
def test_one_decoder_per_model_rebuilt_when_its_modules_change():
    model = tiny_model("llama", seed=6, hidden=64)
    first = lean_decoder(model)
    assert lean_decoder(model) is first
    model.model.embed_tokens = torch.nn.Embedding(64, 64)  # a module the decoder holds, replaced
    first = lean_decoder(model)
    assert first.embed is model.model.embed_tokens and lean_decoder(model) is first
    set_linear_layout(model, "transposed")  # a layout changes the modules in place: the decoder calls them as they are
    assert lean_decoder(model) is first
    quantize_draft_weights(model, "int4")  # new modules
    second = lean_decoder(model)
    assert second is not first and lean_decoder(model) is second
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.packed.add_(1)  # a 4-bit weight that a joined product copied
    assert lean_decoder(model) is not second


@needs_int4
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_output_is_the_targets_with_a_lean_4_bit_draft(arch):
    target = tiny_model(arch, seed=0, hidden=64)
    draft = quantize_draft_weights(tiny_model(arch, seed=1, layers=1, hidden=128), "int4")
    for prompt in ([1, 2, 3], [5, 9, 2, 7, 1]):
        expected = reference(target, prompt, 20)
        for tree in (policies.Chain(4), policies.KAry([3, 2, 1]), policies.Adaptive(6, 0.3)):
            assert treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=20).tokens == expected


@pytest.mark.parametrize("want_hidden, layers", [(False, ()), (True, ()), (True, (0, 1, 2))])
@pytest.mark.parametrize("rows", [1, 3])
def test_target_pass_is_the_same_through_the_lean_decoder(want_hidden, layers, rows):
    """The engine's target pass over B rows of a right-padded cache: logits and the features an EAGLE head reads
    (last hidden state, or fused layers with the last one among them) as transformers' modules give them."""
    target = tiny_model("llama", seed=7, hidden=64)
    inputs = [_tree_pass_inputs(6, 4, seed=1 + b) for b in range(rows)]
    lengths = [6 - b for b in range(rows)]  # ragged rows: row b holds 6 - b tokens of the 6-slot cache
    ids = torch.stack([nodes for _, nodes, _, _ in inputs])
    positions = torch.stack([pos - (6 - length) for (_, _, _, pos), length in zip(inputs, lengths)])
    visible = torch.zeros(rows, 4, 10, dtype=torch.bool)
    for b, ((_, _, vis, _), length) in enumerate(zip(inputs, lengths)):
        visible[b, :, :length] = True
        visible[b, :, 6:] = vis[:, 6:]
    prefill = torch.stack([prompt for prompt, _, _, _ in inputs])
    out = []
    with torch.inference_mode():
        for lean in (None, lean_decoder(target)):
            cache = new_cache(target, 32)
            target.model(input_ids=prefill, cache=cache, use_cache=True)
            logits, features = engine.target_forward(target, lean, want_hidden, layers, ids, positions,
                                                     additive(visible, torch.float32), cache)
            out.append((logits, None if features is None else features.all()))
    (logits, features), (lean_logits, lean_features) = out
    assert lean_logits.shape == (rows, 4, 64)
    torch.testing.assert_close(lean_logits, logits, atol=1e-4, rtol=1e-5)
    if want_hidden:
        assert lean_features.shape == (rows, 4, 64 * max(1, len(layers)))
        torch.testing.assert_close(lean_features, features, atol=1e-5, rtol=1e-5)
    else:
        assert features is None and lean_features is None


def test_an_eager_model_runs_through_transformers():
    assert "eager" in lean_unsupported(tiny_model("llama", seed=0, attn="eager"))


@needs_int4
def test_a_draft_quantized_in_inference_mode_gets_a_decoder():
    """Inference tensors keep no version counter: the decoder's cache key must not ask them for one."""
    with torch.inference_mode():
        model = quantize_draft_weights(tiny_model("qwen2", seed=8, hidden=128), "int4")
        decoder = lean_decoder(model)
        assert decoder is not None and lean_decoder(model) is decoder


def test_a_long_prompt_hands_the_mask_to_torchs_grouped_attention(monkeypatch):
    """Past MAX_GROUPED_ROWS query rows the mask is not copied per group; the hidden states stay the same."""
    model = tiny_model("qwen2", seed=3, hidden=64)
    expected = _hidden_both_ways(model, torch.float32)[1]
    monkeypatch.setattr(attention, "MAX_GROUPED_ROWS", 4)
    mask = torch.zeros(1, 1, 3, 9)
    assert attention.group_mask(mask, 2) is mask
    torch.testing.assert_close(_hidden_both_ways(model, torch.float32)[1], expected, atol=1e-6, rtol=0)


def test_transformers_output_capturing_hooks_leave_the_lean_pass_on():
    """transformers leaves inactive output-capturing hooks on a model's layers once it was asked for hidden states
    (an EAGLE prefill): the lean pass must stay on after that; any other hook still turns it off."""
    model = tiny_model("llama")
    model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert any(m._forward_hooks for m in model.modules())  # what transformers installed
    assert lean_unsupported(model) is None and lean_decoder(model) is not None
    handle = model.model.layers[0].register_forward_hook(lambda *_: None)
    assert "hooks" in lean_unsupported(model)
    handle.remove()
