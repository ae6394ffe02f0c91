"""treespec's decoder pass in C (treespec.models.native_pass): the same hidden states, bit for bit, as the lean torch
loop and transformers' modules in exact arithmetic, for tree masks, batches of padded rows, kept layer states,
skipped layers and head shapes whose query heads tile unevenly; when it runs and when it does not."""

from __future__ import annotations

import pytest
import torch
from test_quantize import snapped
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from treespec.decode.cache import cache_dtype, new_cache
from treespec.models import int4_cpu, native_pass
from treespec.models.exact import ExactRMSNorm, ExactSiLU
from treespec.models.lean import lean_decoder
from treespec.models.quantize import quantize_target_weights, set_activations

pytestmark = pytest.mark.skipif(int4_cpu.kernel_unavailable() is not None,
                                reason=f"treespec's CPU kernels cannot run here: {int4_cpu.kernel_unavailable()}")

VOCAB = 96


def four_bit(arch: str = "llama", *, hidden: int = 256, heads: int = 4, kv_heads: int = 2, layers: int = 3,
             seed: int = 0, quantized: bool = True):
    torch.manual_seed(seed)
    config_class, model_class = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = config_class(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=512,
                          vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    config._attn_implementation = "treespec_sdpa"
    model = snapped(model_class(config).eval())
    return quantize_target_weights(model, "int4") if quantized else model


def _pass(model, native: bool, tokens, positions, mask, prefix: torch.Tensor, keep=(), layers=None):
    """Prefill `prefix` [B, P] causally, then one pass over tokens [B, M] under `mask` [B, 1, M, P + M] (additive)."""
    decoder = lean_decoder(model)
    held, decoder.native = decoder.native, decoder.native if native else None
    try:
        rows, p = prefix.shape
        cache = new_cache(model, 256, layers=None if layers is None else len(layers))
        causal = torch.triu(torch.full((p, p), torch.finfo(torch.float32).min), diagonal=1)[None, None]
        decoder(prefix, torch.arange(p).expand(rows, p), causal, cache, layers=layers)
        return decoder(tokens, positions, mask, cache, keep=keep, layers=layers)
    finally:
        decoder.native = held


def _tree_inputs(rows: int, p: int, m: int, seed: int = 0):
    """Random tokens, positions and a random tree-like visibility: every row sees the prefix, itself and a random
    subset of the earlier new tokens."""
    generator = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, VOCAB, (rows, p), generator=generator)
    tokens = torch.randint(0, VOCAB, (rows, m), generator=generator)
    earlier = torch.rand(rows, m, m, generator=generator) < 0.5
    visible = torch.cat([torch.ones(rows, m, p, dtype=torch.bool),
                         torch.tril(earlier, -1) | torch.eye(m, dtype=torch.bool)], -1)
    mask = torch.zeros(rows, 1, m, p + m).masked_fill_(~visible[:, None], torch.finfo(torch.float32).min)
    positions = p + visible[..., p:].sum(-1) - 1  # depth in the tree
    return prefix, tokens, positions, mask


@pytest.mark.parametrize("arch,hidden,heads,kv_heads", [("llama", 256, 4, 2), ("qwen2", 256, 4, 2),
                                                        ("llama", 384, 6, 2), ("llama", 512, 8, 1),
                                                        ("qwen2", 256, 2, 1)])
def test_a_tree_pass_in_c_is_the_torch_loops_bit_for_bit(arch, hidden, heads, kv_heads):
    """Query heads per key/value head 2, 3 and 8 (tiles of 3), head sizes 64 and 128, biases (qwen2)."""
    model = four_bit(arch, hidden=hidden, heads=heads, kv_heads=kv_heads)
    assert lean_decoder(model).native is not None, lean_decoder(model).native_unsupported
    for rows, split in ((9, False), (1, False), (1, True)):  # one row may attend each kv head's query heads in two parts
        lean_decoder(model).native.head_split = native_pass.HeadSplit(fixed=split)
        prefix, tokens, positions, mask = _tree_inputs(1, 37, rows)
        with torch.inference_mode():
            native, _ = _pass(model, True, tokens, positions, mask, prefix)
            loop, _ = _pass(model, False, tokens, positions, mask, prefix)
        assert torch.equal(native, loop)


def test_the_c_pass_on_two_threads_is_the_torch_loops_bit_for_bit():
    """Two threads split the products' column blocks, attention's tasks and, from PARALLEL_ROWS rows on, the per-row
    work (norms, rotary embedding, cache writes, SiLU, residuals), never a row's arithmetic: one row (its kv heads'
    query heads in one task or two), 4 and 9 tree rows, a batch of 3 x 5 and the prefixes' prefills give the torch
    loop's outputs."""
    model = four_bit(heads=6, kv_heads=2, hidden=384)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for batch, prefix_length, rows, split in ((1, 37, 1, False), (1, 37, 1, True), (1, 37, 4, False),
                                                  (1, 37, 9, False), (3, 21, 5, False)):
            lean_decoder(model).native.head_split = native_pass.HeadSplit(fixed=split)
            prefix, tokens, positions, mask = _tree_inputs(batch, prefix_length, rows, seed=rows)
            with torch.inference_mode():
                native, _ = _pass(model, True, tokens, positions, mask, prefix)
                loop, _ = _pass(model, False, tokens, positions, mask, prefix)
            assert torch.equal(native, loop)
    finally:
        torch.set_num_threads(threads)


def test_the_head_split_is_measured_where_it_runs_and_kept():
    """Unfixed, the passes it applies to alternate between both settings until each has its trials, then the one
    with the lower median time stays; fixed, it never changes."""
    choice = native_pass.HeadSplit(trials=3)
    times = {False: [3.0, 3.1, 2.9], True: [2.0, 9.0, 2.1]}  # splitting: the lower median, the higher mean
    seen = []
    for i in range(6):
        split = choice.next()
        seen.append(split)
        choice.record(split, times[split][i // 2])
    assert seen == [False, True, False, True, False, True] and choice.chosen is True
    assert choice.summary() == {"split": True, "ms_per_layer": {"one task": 3000.0, "two tasks": 2100.0}}
    assert [choice.next() for _ in range(3)] == [True] * 3
    slower = native_pass.HeadSplit(trials=2)
    for seconds in (1.0, 5.0, 1.0, 5.0):
        slower.record(slower.next(), seconds)
    assert slower.chosen is False
    fixed = native_pass.HeadSplit(fixed=True, trials=1)
    fixed.record(True, 100.0)
    assert fixed.next() is True and fixed.summary() == {"split": True, "ms_per_layer": {}}


def test_a_rows_outputs_in_c_do_not_depend_on_the_rows_beside_it():
    """A leading extra row (seeing the prefix and itself only) moves every row to another place in the products' row
    tiles, the attention's tasks and the cache's slots: no row's outputs may move."""
    model = four_bit(heads=6, kv_heads=2, hidden=384)
    prefix, tokens, positions, mask = _tree_inputs(1, 45, 11, seed=4)
    p, m = prefix.shape[1], tokens.shape[1]
    lone = torch.full((1, 1, 1, p + m + 1), torch.finfo(torch.float32).min)
    lone[..., : p + 1] = 0.0
    shifted = torch.cat([mask[..., :p], torch.full((1, 1, m, 1), torch.finfo(torch.float32).min), mask[..., p:]], -1)
    with torch.inference_mode():
        alone, _ = _pass(model, True, tokens, positions, mask, prefix)
        tiled, _ = _pass(model, True, torch.cat([(tokens[:, :1] + 1) % VOCAB, tokens], 1),
                         torch.cat([torch.full((1, 1), p), positions], 1), torch.cat([lone, shifted], 2), prefix)
    assert torch.equal(tiled[:, 1:], alone)


def test_batches_kept_states_and_skipped_layers_match_the_torch_loop():
    model = four_bit(layers=4)
    prefix, tokens, positions, mask = _tree_inputs(3, 21, 5, seed=1)
    with torch.inference_mode():
        native, native_kept = _pass(model, True, tokens, positions, mask, prefix, keep=(0, 2, 4))
        loop, loop_kept = _pass(model, False, tokens, positions, mask, prefix, keep=(0, 2, 4))
        skipped = [_pass(model, flag, tokens, positions, mask, prefix, layers=[0, 3])[0] for flag in (True, False)]
    assert torch.equal(native, loop)
    assert native_kept.keys() == loop_kept.keys() == {0, 2, 4}
    assert all(torch.equal(native_kept[i], loop_kept[i]) for i in native_kept)
    assert torch.equal(*skipped)


def test_the_c_pass_is_transformers_modules_in_exact_arithmetic():
    model = four_bit("qwen2")
    assert all(isinstance(m.input_layernorm, ExactRMSNorm) and isinstance(m.mlp.act_fn, ExactSiLU)
               for m in model.model.layers)
    ids = torch.randint(0, VOCAB, (1, 60), generator=torch.Generator().manual_seed(2))
    decoder, cache = lean_decoder(model), new_cache(model, 128)
    with torch.inference_mode():
        reference = model.model(ids).last_hidden_state[0]
        causal = torch.triu(torch.full((50, 50), torch.finfo(torch.float32).min), diagonal=1)[None, None]
        first, _ = decoder(ids[:, :50], torch.arange(50)[None], causal, cache)
        steps = [decoder(ids[:, i:i + 1], torch.tensor([[i]]), torch.zeros(1, 1, 1, i + 1), cache)[0][0]
                 for i in range(50, 60)]
    assert torch.equal(torch.cat([first[0], *steps]), reference)
    assert cache.layers[0].keys.dtype == torch.float32 and cache_dtype(model) is None  # the C pass widens keys


def test_it_is_off_where_asked_and_for_models_outside_exact_arithmetic(monkeypatch):
    monkeypatch.setenv(native_pass.ENV, "0")
    assert lean_decoder(four_bit()).native_unsupported == f"{native_pass.ENV}=0"
    monkeypatch.delenv(native_pass.ENV)
    plain = four_bit()
    plain.model.norm = torch.nn.RMSNorm(256)  # a norm outside exact arithmetic
    plain.model.norm.variance_epsilon = 1e-6
    assert "final norm" in lean_decoder(plain).native_unsupported
    assert lean_decoder(four_bit()).native is not None


def test_a_4bit_eagle_heads_layer_runs_in_c_as_its_modules_compute_it():
    """precision.INT4_DRAFT: an EAGLE head rounded to 4 bits drafts through the C pass (a stack of layers without
    embeddings or a final norm), with the torch loop's values bit for bit and its modules' up to float64 rounding;
    it proposes, the target decides: greedy outputs stay the target's."""
    import treespec
    from treespec import policies
    from treespec.drafters import EagleDrafter
    from treespec.models.eagle_head import init_eagle_from_target
    from treespec.models.precision import INT4_DRAFT, configure, precision_name

    target = four_bit(layers=2, quantized=False)
    torch.manual_seed(3)
    head = init_eagle_from_target(target, list(range(0, VOCAB, 3)), feature_layers=[1, 2]).eval()
    target = quantize_target_weights(target, "int4")
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    configure(head, INT4_DRAFT, "standard")
    assert precision_name(head) == INT4_DRAFT
    prompt = [5, 9, 13, 2, 7, 40, 41]
    features = torch.randn(1, len(prompt), 2 * 256)

    def draft_logits(way: str) -> torch.Tensor:
        drafter = EagleDrafter(head, target, 64)
        assert drafter.lean is not None and drafter.lean.native is not None, drafter.lean.native_unsupported
        lean, native = drafter.lean, drafter.lean.native  # the head's lean decoder is shared between drafters
        if way == "loop":
            drafter.lean.native = None
        elif way == "modules":
            drafter.lean = None
        try:
            with torch.inference_mode():
                drafter.reset([prompt], features)
                root = drafter.root_logits([prompt[-1]])
                nodes = drafter.node_logits([([1, 2, 3], [20, 21, 22], [0, 0, 0])])[0]
                deeper = drafter.node_logits([([4], [23], [2])])[0]
        finally:
            lean.native = native
        return torch.cat([root, nodes, deeper])

    assert torch.equal(draft_logits("c"), draft_logits("loop"))  # int8 activations where the kernels have them
    # the modules attend in fp32 (sdpa), so they match up to float rounding, which an input's rounding to int8 can
    # turn into a whole step (seen on an Intel Xeon, 2026-12-07): compared on bf16 inputs
    set_activations(head, "bf16")
    c, modules = draft_logits("c"), draft_logits("modules")
    assert torch.equal(c, draft_logits("loop"))
    finite = torch.isfinite(c)
    torch.testing.assert_close(c[finite], modules[finite], atol=1e-4, rtol=1e-4)
    expected = treespec.autoregressive(target, prompt, max_new_tokens=16).tokens
    got = treespec.generate(target, head, prompt, tree=policies.Dynamic(6, 4, 3), max_new_tokens=16).tokens
    assert got == expected


def test_q6_k_layers_run_in_c_beside_4_bit_ones_bit_for_bit():
    """A Q4_K_M GGUF's target (the Qwen2.5-Coder 1.5B): v_proj and down_proj of some layers and the LM head in Q6_K,
    held in 6 bits (quantize.Int6Linear); q | k | v is then two products side by side."""
    from test_quantize import six_bit

    from treespec.models.quantize import Int6Linear

    model = four_bit("qwen2", layers=3, quantized=False)
    with torch.no_grad():
        for layer in model.model.layers[::2]:
            for linear in (layer.self_attn.v_proj, layer.mlp.down_proj):
                linear.weight.copy_(six_bit(linear.weight))
    quantize_target_weights(model, "int4")
    decoder = lean_decoder(model)
    assert isinstance(model.model.layers[0].self_attn.v_proj, Int6Linear)
    assert [len(layer.qkv.parts) for layer in decoder.layers] == [2, 1, 2]
    assert decoder.native is not None, decoder.native_unsupported
    prefix, tokens, positions, mask = _tree_inputs(2, 29, 7, seed=3)
    with torch.inference_mode():
        native, _ = _pass(model, True, tokens, positions, mask, prefix)
        loop, _ = _pass(model, False, tokens, positions, mask, prefix)
    assert torch.equal(native, loop)


@pytest.mark.skipif(int4_cpu.int8_unavailable() is not None, reason="no int8 activations here")
def test_parts_on_int8_activations_run_in_c_as_the_torch_loop_does():
    """int4-a8 (quantize.set_activations): each part hands its input format to the C pass; a 6-bit part too."""
    from test_quantize import six_bit

    model = four_bit("qwen2", layers=2, quantized=False)
    with torch.no_grad():
        model.model.layers[0].self_attn.v_proj.weight.copy_(six_bit(model.model.layers[0].self_attn.v_proj.weight))
    quantize_target_weights(model, "int4-a8")
    decoder = lean_decoder(model)
    assert decoder.native is not None, decoder.native_unsupported
    assert decoder.native.layers[0].qkv.parts[1].x_format == 2  # X_FP32_TO_INT8
    prefix, tokens, positions, mask = _tree_inputs(2, 33, 6, seed=5)
    with torch.inference_mode():
        native, _ = _pass(model, True, tokens, positions, mask, prefix)
        loop, _ = _pass(model, False, tokens, positions, mask, prefix)
    assert torch.equal(native, loop)


def test_the_targets_prefill_runs_in_c_and_decodes_as_transformers_does():
    """Decoder._prefill: where the target's passes run in C the prompt goes through one C call too, batches of
    unequal prompts (right padding) included, and greedy outputs stay transformers' own; the cache it leaves is the
    one transformers' causal pass leaves."""
    from conftest import reference

    import treespec
    from treespec import policies

    model = four_bit("qwen2", layers=2)
    draft = four_bit("qwen2", layers=1, seed=1)
    assert lean_decoder(model).native is not None
    prompts = [[3, 14, 15, 92, 65, 35], [8, 9], [27, 18, 28, 18, 28, 45, 90, 45, 23]]
    with torch.inference_mode():
        expected = [reference(model, p, 10) for p in prompts]
        assert [treespec.generate(model, draft, p, tree=policies.Dynamic(5, 3, 2), max_new_tokens=10).tokens
                for p in prompts] == expected
        rows = treespec.generate_batch(model, draft, prompts, tree=policies.Chain(2), max_new_tokens=10)
        assert [r.tokens for r in rows] == expected
        ids = torch.tensor([prompts[2]])
        via_modules, via_c = new_cache(model, 32), new_cache(model, 32)
        model.model(input_ids=ids, cache=via_modules, use_cache=True)
        causal = torch.triu(torch.full((9, 9), torch.finfo(torch.float32).min), diagonal=1)[None, None]
        lean_decoder(model)(ids, torch.arange(9)[None], causal, via_c)
    assert torch.equal(via_modules.layers[1].keys[..., :9, :], via_c.layers[1].keys[..., :9, :])
