"""4-bit weights (treespec.models.quantize): the pure quantizer, the int4 layer against its dequantized weight, the
vocabulary-subset head, and losslessness: greedy parity with the target alone and the first tokens' law under
sampling, whatever the draft's rounding; a target's 4-bit-grid layers held as codes, as the same model."""

from __future__ import annotations

import pytest
import torch
from conftest import PROMPTS, OneRow, all_policies, reference, tiny_model

import treespec
from treespec import policies
from treespec.app.configs import LoadedPair, with_draft_weights, with_target_weights
from treespec.decode.sampling import SamplingConfig
from treespec.drafters import CausalLMDrafter
from treespec.errors import ConfigError
from treespec.eval import certify
from treespec.models import int4_cpu, native_pass
from treespec.models.precision import INT4_DRAFT
from treespec.models.quantize import (
    GROUP,
    INT8_ACTIVATIONS,
    Int4Linear,
    Int6Linear,
    dequantize_int4,
    exact_int4_grid,
    held_schemes,
    int4_available,
    int4_grid,
    int6_grid,
    on_int4_grid,
    quantize_draft_weights,
    quantize_int4,
    quantize_target_weights,
    set_activations,
    weight_scheme,
)
from treespec.plan import hardware

pytestmark = pytest.mark.skipif(not int4_available(), reason="this torch build has no CPU int4 kernel")


def test_weights_on_a_4_bit_grid_come_back_exactly():
    torch.manual_seed(0)
    rows, cols = 8, 2 * GROUP
    codes = torch.randint(0, 16, (rows, cols), dtype=torch.uint8)
    codes[:, ::GROUP], codes[:, 1::GROUP] = 0, 15  # every group spans the full code range
    scale = (torch.rand(rows, 2, 1) + 0.1).half().float()  # scales and minimums are held in fp16
    low = torch.randn(rows, 2, 1).half().float()
    weight = (codes.float().reshape(rows, 2, GROUP) * scale + low).reshape(rows, cols)
    got_codes, scale_zero = quantize_int4(weight)
    assert torch.equal(got_codes, codes) and scale_zero.shape == (2, rows, 2)
    assert torch.allclose(dequantize_int4(got_codes, scale_zero), weight, atol=1e-5)


def test_rounding_error_is_at_most_half_a_step():
    weight = torch.randn(48, 96)
    codes, scale_zero = quantize_int4(weight)
    step = scale_zero[..., 0].t().repeat_interleave(GROUP, dim=1)  # [O, I]
    assert int(codes.max()) <= 15
    assert ((dequantize_int4(codes, scale_zero) - weight).abs() <= step / 2 + 1e-6).all()


@pytest.mark.parametrize("out_features", [16, 40])  # 40: rows padded to 48 for the kernel, cut after it
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_linear_multiplies_by_its_dequantized_weight(out_features, dtype):
    torch.manual_seed(1)
    linear = torch.nn.Linear(64, out_features)
    layer = Int4Linear.from_linear(linear)
    for shape in [(1, 64), (3, 64), (2, 5, 64)]:
        x = torch.randn(*shape)
        out = layer(x.to(dtype))
        expected = torch.nn.functional.linear(x.bfloat16().float(), layer.weight_fp32(), linear.bias)
        assert out.dtype == dtype and out.shape == (*shape[:-1], out_features)
        assert torch.allclose(out.float(), expected, atol=0.05, rtol=0.02)
    assert (layer.weight_fp32() - linear.weight).abs().max() < 0.1 * linear.weight.abs().max()


def test_rows_keep_the_same_codes():
    layer = Int4Linear.from_linear(torch.nn.Linear(32, 64))
    index = torch.tensor([3, 7, 63, 0, 12])  # 5 rows: padded to 16 inside, cut after
    subset = layer.rows(index)
    x = torch.randn(4, 32)
    assert subset.out_features == 5 and torch.equal(subset(x), layer(x)[:, index])


def test_bad_inputs_are_named():
    with pytest.raises(ConfigError, match="divisible by 32"):
        Int4Linear.from_linear(torch.nn.Linear(48, 16))
    with pytest.raises(ConfigError, match="unknown draft weight scheme"):
        quantize_draft_weights(tiny_model("llama", layers=1), "int3")
    with pytest.raises(ConfigError, match="needs a draft"):
        with_draft_weights(LoadedPair(tiny_model("llama"), None, None), "int4")
    model = tiny_model("llama", layers=1)
    assert quantize_draft_weights(model, None) is model and isinstance(model.lm_head, torch.nn.Linear)


def quantized(arch: str, **kwargs) -> torch.nn.Module:
    model = quantize_draft_weights(tiny_model(arch, **kwargs), "int4")
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    return model


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_parity_with_a_4_bit_draft(arch):
    target, draft = tiny_model(arch, seed=0), quantized(arch, seed=1, layers=1)
    for prompt in PROMPTS[:2]:
        expected = reference(target, prompt, 20)
        for name, tree in all_policies().items():
            got = treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=20)
            assert got.tokens == expected, (arch, name, prompt)
        subset = treespec.generate(target, draft, prompt, tree=policies.Chain(4), max_new_tokens=20,
                                   draft_vocab=torch.arange(0, 64, 2))
        assert subset.tokens == expected


def test_a_vocabulary_subset_of_a_4_bit_head_is_its_logits_restricted():
    draft = quantized("qwen2", seed=1, layers=1)
    vocab = torch.tensor([0, 3, 4, 10, 17, 40, 63])
    full, sub = OneRow(CausalLMDrafter(draft, 64)), OneRow(CausalLMDrafter(draft, 64, vocab))
    assert sub.drafter.subset.int4 is not None and sub.drafter.subset.int4.out_features == 7
    with torch.inference_mode():
        for d in (full, sub):
            d.reset([3, 17, 5, 9])
        a, b = full.root_logits(9)[None], sub.root_logits(9)[None]
        c, d = full.node_logits([1, 2], [4, 10], [0, 0]), sub.node_logits([1, 2], [4, 10], [0, 0])
        for whole, part in ((a, b), (c, d)):
            assert torch.allclose(part[:, vocab], whole[:, vocab], atol=1e-5)
            assert int(torch.isneginf(part).sum()) == part.shape[0] * (64 - 7)


def test_a_vocabulary_subset_of_a_head_quantized_in_inference_mode():
    """Inference tensors keep no version counter: the subset head's cache must not ask them for one."""
    vocab = torch.tensor([0, 3, 4, 10, 17, 40, 63])
    with torch.inference_mode():
        draft = quantize_draft_weights(tiny_model("qwen2", seed=1, layers=1), "int4")
        first, again = OneRow(CausalLMDrafter(draft, 64, vocab)), OneRow(CausalLMDrafter(draft, 64, vocab))
        head = first.drafter.subset.int4
        assert again.drafter.subset.int4 is head and head.out_features == 7  # built once
        for d in (first, again):
            d.reset([3, 17, 5, 9])
        assert torch.equal(first.root_logits(9), again.root_logits(9))


def test_first_two_tokens_follow_the_target_with_a_4_bit_draft():
    v, runs = 8, 1500
    target = tiny_model("llama", seed=10, vocab=v, hidden=32, layers=1, sharpness=6.0)
    draft = quantize_draft_weights(tiny_model("llama", seed=11, vocab=v, hidden=32, layers=1, sharpness=4.0), "int4")
    prompt, sampling = [1, 4, 2], SamplingConfig(1.0)
    law = certify.target_law(target, prompt, 2, sampling)
    outs, accepted = [], 0
    for run in range(runs):
        out = treespec.generate(target, draft, prompt, tree=policies.KAry([3, 2]), max_new_tokens=3,
                                temperature=1.0, seed=run)
        outs.append(out.tokens[:2])
        accepted += out.steps[0].accepted - 1
    assert accepted > runs * 0.2, "the test needs drafts that are often accepted"
    verdict = certify.certify(certify.pad_runs(outs, law), law)
    assert verdict.passed, verdict.tests


def test_auto_profile_times_a_4_bit_draft_in_one_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    monkeypatch.setattr(hardware, "crossover", lambda standard, other: None)
    monkeypatch.setattr(hardware, "packing_available", lambda: False)
    target, draft = tiny_model("llama", seed=0), quantized("llama", seed=1, layers=1)
    _, draft, resolved = hardware.auto_profile(target, draft, sizes=(1, 2), repeats=1, warmup=0, prefix_len=8)
    assert [c["layout"] for c in resolved.candidates if c["role"] == "draft"] == ["standard"]
    assert {c["layout"] for c in resolved.candidates if c["role"] == "target"} >= {"standard", "transposed"}
    assert isinstance(draft.lm_head, Int4Linear)


@pytest.mark.skipif(native_pass.pass_identity() == "torch", reason="treespec's C pass cannot run here")
def test_auto_profile_times_a_causal_draft_in_4_bits_where_the_c_pass_runs_it(monkeypatch, tmp_path):
    """The 4-bit form of a causal-LM draft (INT4_DRAFT) is a candidate like an EAGLE head's, kept where its levels
    are cheapest, and named so; drafts whose head size the C pass does not take are not timed that way."""
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    monkeypatch.setattr(hardware, "crossover", lambda standard, other: None)
    monkeypatch.setattr(hardware, "packing_available", lambda: False)
    monkeypatch.setattr(hardware, "onednn_available", lambda: False)
    cpu = torch.device("cpu")
    assert INT4_DRAFT not in hardware.draft_precisions(tiny_model("llama", seed=1), ["float32"], cpu)  # head size 8
    draft = tiny_model("llama", seed=1, layers=1, hidden=256)  # 4 heads of 64
    assert hardware.draft_precisions(draft, ["float32"], cpu) == ["float32", INT4_DRAFT]

    def measure(target, draft, *, sizes, draft_widths, **kwargs):
        four_bit = any(isinstance(m, Int4Linear) for m in draft.modules())
        return hardware.LatencyProfile({1: {1: 10.0, 2: 12.0}}, {1: {w: 1.0 if four_bit else 3.0 for w in draft_widths}})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    monkeypatch.setattr(hardware, "measure_overheads", lambda *args, **kwargs: (0.0, 0.0))
    _, chosen, resolved = hardware.auto_profile(tiny_model("llama", seed=0), draft, sizes=(1, 2), repeats=1,
                                                warmup=0, prefix_len=8)
    assert resolved.draft_dtype == INT4_DRAFT and isinstance(chosen.model.layers[0].mlp.up_proj, Int4Linear)
    expected = "int8" if int4_cpu.int8_unavailable() is None else "bf16"  # a draft only proposes: the faster inputs
    assert {m.activations for m in chosen.modules() if isinstance(m, Int4Linear)} == {expected}


def test_only_the_head_keeps_its_codes():
    model = quantized("llama", layers=1)
    assert model.lm_head.codes is not None
    inner = model.model.layers[0].mlp.down_proj
    assert inner.codes is None and inner.packed.numel() > 0
    if inner.kernel == "torch":  # torch's packed form cannot be sliced; treespec's layout gives the codes back
        with pytest.raises(ConfigError, match="keep_codes"):
            inner.rows(torch.tensor([0, 1]))
    else:
        x = torch.randn(2, inner.in_features)
        torch.testing.assert_close(inner.rows(torch.tensor([0, 1]))(x), inner(x)[:, :2])


# --- a target's 4-bit weights: held as they are, never rounded ---------------------------------------------


def snapped(model):
    """`model` with every linear weight moved onto a 4-bit grid (as a Q4 GGUF's weights are when loaded)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.weight.shape[1] % GROUP == 0:
                module.weight.copy_(dequantize_int4(*quantize_int4(module.weight)))
    return model


def test_only_weights_on_a_4_bit_grid_are_held_in_4_bits():
    assert not on_int4_grid(torch.randn(16, 64))
    assert on_int4_grid(dequantize_int4(*quantize_int4(torch.randn(16, 64))))
    target = snapped(tiny_model("llama", seed=0))
    with torch.no_grad():
        target.model.layers[0].mlp.down_proj.weight[0, 5] += 1e-3 * target.model.layers[0].mlp.down_proj.weight.std()
        # one weight off the grid: the layer is kept as it is
    quantize_target_weights(target, "int4")
    layer = target.model.layers[0]
    assert isinstance(layer.self_attn.q_proj, Int4Linear) and isinstance(layer.mlp.down_proj, torch.nn.Linear)
    with pytest.raises(ConfigError, match="no linear layer of the target lies on a 4-bit grid"):
        quantize_target_weights(tiny_model("llama", seed=0), "int4")
    assert quantize_target_weights(target, None) is target


def six_bit(weight: torch.Tensor, group: int = 16) -> torch.Tensor:
    """weight [O, I] moved onto a 6-bit grid as a Q6_K tensor's: integers -32..31 times a scale per `group` inputs,
    of either sign, an fp16 value times an integer (d * sc)."""
    grouped = weight.detach().float().reshape(weight.shape[0], -1, group)
    peak = grouped.abs().amax(-1, keepdim=True).clamp_min(1e-6)
    signs = torch.where(torch.arange(grouped.shape[1]) % 3 == 0, -1.0, 1.0)[None, :, None]
    scale = (peak / 32).half().float() * signs
    return (torch.clamp(torch.round(grouped / scale), -32, 31) * scale).reshape(weight.shape)


def q4_k_like(weight: torch.Tensor) -> torch.Tensor:
    """weight [O, I] on a 4-bit grid of 32-weight groups where many groups span fewer than 16 codes (a Q4_K's
    sub-blocks: codes 0..15, a scale and a minimum each, the extreme codes not always used)."""
    grouped = weight.detach().float().reshape(weight.shape[0], -1, 32)
    codes = torch.round((grouped - grouped.amin(-1, keepdim=True)) / (grouped.amax(-1, keepdim=True)
                                                                      - grouped.amin(-1, keepdim=True)) * 15)
    codes = torch.where(torch.arange(grouped.shape[1])[None, :, None] % 2 == 0, (codes // 2), codes)  # 0..7 only
    return (codes * 0.01 - 0.03).reshape(weight.shape)


def test_q4_k_and_q6_k_grids_are_found_exactly_and_held_in_4_and_6_bits():
    torch.manual_seed(0)
    partial = q4_k_like(torch.randn(32, 128))
    codes, scale, minimum = exact_int4_grid(partial)
    assert torch.allclose(codes.float() * scale.repeat_interleave(32, 1) + minimum.repeat_interleave(32, 1), partial,
                          atol=1e-7)
    assert int4_grid(partial)[0].float().sub(codes.float()).abs().max() > 0  # min/max rounding would move weights
    assert exact_int4_grid(torch.randn(32, 128)) is None and exact_int4_grid(six_bit(torch.randn(32, 128))) is None
    for group in (16, 32):
        weight = six_bit(torch.randn(48, 96), group)
        codes, scale = int6_grid(weight, group)
        assert torch.equal((codes.float() - 32) * scale.repeat_interleave(group, 1), weight)
    assert int6_grid(six_bit(torch.randn(48, 96), 16), 32) is None and int6_grid(torch.randn(48, 96), 16) is None
    target = snapped(tiny_model("qwen2", seed=0))
    with torch.no_grad():
        layer = target.model.layers[0]
        layer.self_attn.v_proj.weight.copy_(six_bit(layer.self_attn.v_proj.weight))
        layer.mlp.down_proj.weight.copy_(six_bit(layer.mlp.down_proj.weight))
        layer.mlp.gate_proj.weight.copy_(q4_k_like(layer.mlp.gate_proj.weight))
        expected = {name: module.weight.detach().clone() for name, module in target.named_modules()
                    if isinstance(module, torch.nn.Linear)}
    quantize_target_weights(target, "int4")
    assert isinstance(layer.self_attn.v_proj, Int6Linear) and isinstance(layer.mlp.down_proj, Int6Linear)
    assert isinstance(layer.mlp.gate_proj, Int4Linear) and isinstance(layer.self_attn.q_proj, Int4Linear)
    assert torch.equal(layer.mlp.down_proj.weight_fp32(), expected["model.layers.0.mlp.down_proj"])  # fp16 scales
    # the grid found, its scales and minimums rounded to fp16: at most 2^-11 of each, so 16 * 2^-11 of a group's span
    gate = expected["model.layers.0.mlp.gate_proj"]
    span = gate.reshape(gate.shape[0], -1, 32).amax(-1) - gate.reshape(gate.shape[0], -1, 32).amin(-1)
    error = (layer.mlp.gate_proj.weight_fp32() - gate).abs().reshape(gate.shape[0], -1, 32).amax(-1)
    assert (error <= 16 * 2.0 ** -11 * (span + gate.abs().reshape(gate.shape[0], -1, 32).amax(-1))).all()
    assert error.max() > 0  # 0.01 is no fp16 value: the rounding is real, and bounded
    for prompt in PROMPTS[:2]:  # greedy parity with its own transformers decoding, through every pass kind
        assert treespec.generate(target, target, prompt, tree=policies.Dynamic(6, 3, 2),
                                 max_new_tokens=12).tokens == reference(target, prompt, 12)


def test_a_4_bit_target_is_its_snapped_model_up_to_rounding_and_decodes_as_itself():
    fp32 = snapped(tiny_model("llama", seed=0))
    target = quantize_target_weights(snapped(tiny_model("llama", seed=0)), "int4")
    draft = quantize_target_weights(snapped(tiny_model("llama", seed=1, layers=1)), "int4")
    ids = torch.tensor([PROMPTS[2]])
    with torch.no_grad():
        torch.testing.assert_close(target(ids).logits, fp32(ids).logits, atol=0.5, rtol=0.02)  # bf16 products
    for prompt in PROMPTS:  # the quantized target is the model: greedy parity with its own transformers decoding
        expected = reference(target, prompt, 16)
        for name, tree in all_policies().items():
            assert treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=16).tokens == expected, name
    rows = treespec.generate_batch(target, draft, list(PROMPTS), tree=policies.Dynamic(8, 4, 3), max_new_tokens=16)
    assert [r.tokens for r in rows] == [reference(target, p, 16) for p in PROMPTS]
    pair = with_target_weights(LoadedPair(snapped(tiny_model("llama", seed=0)), None, None), "int4")
    assert isinstance(pair.target.model.layers[1].mlp.gate_proj, Int4Linear)


def _hidden_by_passes(model, tokens: torch.Tensor, splits) -> torch.Tensor:
    """The lean decoder's last hidden states [n, H] for tokens [n], fed in passes of the sizes in `splits` (each a
    causal pass over the cache so far)."""
    from treespec.decode.cache import new_cache
    from treespec.models.lean import lean_decoder

    decoder, cache, start, out = lean_decoder(model), new_cache(model, 128), 0, []
    for size in splits:
        mask = torch.triu(torch.full((size, start + size), float("-inf")), diagonal=start + 1)[None, None]
        hidden, _ = decoder(tokens[None, start:start + size], torch.arange(start, start + size)[None], mask, cache)
        out.append(hidden[0])
        start += size
    return torch.cat(out)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("exact", [True, False])
def test_a_4_bit_targets_hidden_states_do_not_depend_on_how_its_passes_are_cut(monkeypatch, arch, exact):
    """Its products round their inputs to bf16, so a last-bit difference in attention becomes a bf16 step: exact
    attention makes one-token passes, chains, uneven passes and transformers' own causal pass agree bit for bit
    (the control, float32 attention, does not on this model here; it is skipped where it happens to)."""
    from treespec.decode import cache
    from treespec.models import attention, lean

    if not exact:
        for module in (lean, attention, cache):
            monkeypatch.setattr(module, "exact_attention", lambda module: False)
    target = quantize_target_weights(
        snapped(tiny_model(arch, seed=3, hidden=256, layers=4, vocab=96, context=512)), "int4")
    tokens = torch.randint(0, 96, (208,), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        one_by_one = _hidden_by_passes(target, tokens, [200] + [1] * 8)[200:]
        runs = {"chain": _hidden_by_passes(target, tokens, [200, 8])[200:],
                "uneven": _hidden_by_passes(target, tokens, [200, 3, 5])[200:],
                "transformers": target.model(tokens[None]).last_hidden_state[0, 200:]}
    agree = {name: torch.equal(hidden, one_by_one) for name, hidden in runs.items()}
    if exact:
        assert all(agree.values()), agree
    elif all(agree.values()):
        pytest.skip("float32 attention happened to be row-invariant for this model on this machine")


def test_a_target_is_timed_on_int8_inputs_wherever_the_kernels_have_them(monkeypatch):
    """`held_schemes`: bf16 and int8 inputs where the AVX-512 kernels multiply both, int8 ones only on the AVX2 build
    (its bf16 form widens every code to fp32), bf16 where no int8 form runs."""
    monkeypatch.setattr(int4_cpu, "isa", lambda: ("avx512", None))
    monkeypatch.setattr(int4_cpu, "int8_unavailable", lambda: None)
    assert held_schemes() == ("int4", INT8_ACTIVATIONS)
    monkeypatch.setattr(int4_cpu, "isa", lambda: ("avx2", None))
    assert held_schemes() == (INT8_ACTIVATIONS,)
    monkeypatch.setattr(int4_cpu, "int8_unavailable", lambda: "the kernels do not build here")
    assert held_schemes() == ("int4",)
    monkeypatch.setattr(int4_cpu, "isa", lambda: ("avx512", None))
    assert held_schemes() == ("int4",)


@pytest.mark.parametrize("int4_ms", [{1: 5.0, 2: 6.0}, {1: 20.0, 2: 24.0}])
def test_hardware_auto_holds_a_4_bit_grid_target_as_codes_where_that_plans_faster(monkeypatch, tmp_path, int4_ms):
    """target_weights="auto": a target on a 4-bit grid is also timed as 4-bit codes (one layout, fp32) and held so
    when it plans faster, from the cache too; otherwise it stays as loaded. A target off the grid is not timed so."""
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    monkeypatch.setattr(hardware, "packing_available", lambda: False)
    monkeypatch.setattr(hardware, "onednn_available", lambda: False)
    plain_ms = {1: 10.0, 2: 12.0}

    def measure(target, draft, *, sizes, draft_widths, **kwargs):
        held = any(isinstance(m, Int4Linear) for m in target.modules())
        return hardware.LatencyProfile({1: int4_ms if held else plain_ms}, {1: {w: 1.0 for w in draft_widths}})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    target, draft, resolved = hardware.auto_profile(snapped(tiny_model("llama", seed=0)), tiny_model("llama", seed=1),
                                                    target_weights="auto", sizes=(1, 2), repeats=1, warmup=0,
                                                    prefix_len=8)
    scheme = held_schemes()[0]  # both forms time alike here, and int8 inputs must win by INT8_MARGIN
    timed = [c for c in resolved.candidates if c["role"] == "target" and c.get("weights") == scheme]
    assert [c["layout"] for c in timed] == ["standard"]
    faster = int4_ms[1] < plain_ms[1]
    assert (resolved.target_weights == scheme) == faster == isinstance(target.model.layers[0].mlp.up_proj, Int4Linear)
    assert (f"{scheme} codes" in resolved.models()) == faster
    again, _, cached = hardware.auto_profile(snapped(tiny_model("llama", seed=0)), tiny_model("llama", seed=1),
                                             target_weights="auto", sizes=(1, 2), repeats=1, warmup=0, prefix_len=8)
    assert cached.origin.startswith("cached") and (cached.target_weights == scheme) == faster
    assert isinstance(again.model.layers[0].mlp.up_proj, Int4Linear) == faster
    _, _, off_grid = hardware.auto_profile(tiny_model("llama", seed=0), None, target_weights="auto", sizes=(1, 2),
                                           repeats=1, warmup=0, prefix_len=8)
    assert off_grid.target_weights is None and not any(c.get("weights") for c in off_grid.candidates)
    with pytest.raises(ConfigError, match="target_weights"):
        hardware.auto_profile(snapped(tiny_model("llama", seed=0)), None, target_weights="int8", sizes=(1,))


needs_int8 = pytest.mark.skipif(int4_cpu.int8_unavailable() is not None,
                                reason=f"the kernels have no int8 activations here: {int4_cpu.int8_unavailable()}")


@needs_int8
@pytest.mark.parametrize("int8_speedup", [1.1, 1.5])
def test_hardware_auto_keeps_int8_inputs_only_where_they_win_by_the_margin(monkeypatch, tmp_path, int8_speedup):
    """Where both input forms are timed, int8 inputs (another, less faithful model) are held only when they plan
    INT8_MARGIN times faster than bf16 inputs."""
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    monkeypatch.setattr(hardware, "packing_available", lambda: False)
    monkeypatch.setattr(hardware, "onednn_available", lambda: False)
    monkeypatch.setattr(int4_cpu, "isa", lambda: ("avx512", None))

    def measure(target, draft, *, sizes, draft_widths, **kwargs):
        forms = {getattr(m, "activations", None) for m in target.modules() if isinstance(m, Int4Linear)}
        ms = {1: 10.0, 2: 12.0} if not forms else {n: v / (int8_speedup if "int8" in forms else 1.0)
                                                   for n, v in {1: 6.0, 2: 7.0}.items()}
        return hardware.LatencyProfile({1: ms}, {1: {w: 1.0 for w in draft_widths}})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    target, _, resolved = hardware.auto_profile(snapped(tiny_model("llama", seed=0)), tiny_model("llama", seed=1),
                                                target_weights="auto", sizes=(1, 2), repeats=1, warmup=0, prefix_len=8)
    timed = {c.get("weights") for c in resolved.candidates if c["role"] == "target"}
    assert timed == {None, "int4", INT8_ACTIVATIONS}
    expected = INT8_ACTIVATIONS if int8_speedup > hardware.INT8_MARGIN else "int4"
    assert resolved.target_weights == expected == weight_scheme(target)
    assert (target.model.layers[0].mlp.up_proj.activations == "int8") == (expected == INT8_ACTIVATIONS)


@needs_int8
def test_a_target_on_int8_activations_is_its_own_model_and_decodes_as_itself():
    """int4-a8: the same codes, every product on int8 inputs (set_activations); greedy outputs stay the quantized
    target's own, through trees, chains and batches, and its hidden states do not depend on how passes are cut."""
    target = quantize_target_weights(snapped(tiny_model("llama", seed=0, hidden=256, vocab=96, context=512)),
                                     INT8_ACTIVATIONS)
    draft = quantize_target_weights(snapped(tiny_model("llama", seed=1, layers=1, hidden=256, vocab=96)), "int4")
    held = [m for m in target.modules() if isinstance(m, Int4Linear)]
    assert held and all(m.activations == "int8" for m in held) and weight_scheme(target) == INT8_ACTIVATIONS
    assert weight_scheme(draft) == "int4" and "activations=int8" in repr(held[0])
    for prompt in PROMPTS[:3]:
        expected = reference(target, prompt, 14)
        for tree in (policies.Dynamic(6, 3, 2), policies.Chain(3), policies.KAry([2, 2])):
            assert treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=14).tokens == expected
    rows = treespec.generate_batch(target, draft, list(PROMPTS[:3]), tree=policies.Dynamic(6, 3, 2), max_new_tokens=14)
    assert [r.tokens for r in rows] == [reference(target, p, 14) for p in PROMPTS[:3]]
    tokens = torch.randint(0, 96, (208,), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        one_by_one = _hidden_by_passes(target, tokens, [200] + [1] * 8)[200:]
        assert torch.equal(_hidden_by_passes(target, tokens, [200, 3, 5])[200:], one_by_one)
        assert torch.equal(target.model(tokens[None]).last_hidden_state[0, 200:], one_by_one)


@needs_int8
def test_activations_can_be_switched_and_the_model_is_named_and_fingerprinted_by_them():
    from treespec.models.lean import lean_decoder

    model = quantize_target_weights(snapped(tiny_model("llama", seed=2, hidden=256, vocab=96)), "int4")
    ids = torch.tensor([PROMPTS[1]])
    with torch.inference_mode():
        bf16_logits, bf16_print, bf16_lean = model(ids).logits, hardware.model_fingerprint(model), lean_decoder(model)
        set_activations(model, "int8")
        int8_logits = model(ids).logits
        assert lean_decoder(model) is not bf16_lean  # rebuilt: the C pass's parts take the new input format
        assert not torch.equal(int8_logits, bf16_logits)
        torch.testing.assert_close(int8_logits, bf16_logits, atol=1.0, rtol=0.05)
        assert hardware.model_fingerprint(model) != bf16_print
        set_activations(model, "bf16")
        assert torch.equal(model(ids).logits, bf16_logits) and hardware.model_fingerprint(model) == bf16_print
    with pytest.raises(ConfigError, match="activations"):
        set_activations(model, "fp8")


def test_int8_activations_are_refused_with_the_reason_where_the_cpu_lacks_them(monkeypatch):
    from treespec.models.loading import default_target_weights

    monkeypatch.setattr(int4_cpu, "int8_unavailable", lambda: "the CPU lacks avx512_vnni")
    with pytest.raises(ConfigError, match="avx512_vnni"):
        quantize_target_weights(snapped(tiny_model("llama", seed=0, hidden=256)), INT8_ACTIVATIONS)
    with pytest.raises(ConfigError, match="avx512_vnni"):
        set_activations(tiny_model("llama"), "int8")
    assert default_target_weights("qwen2.5-coder-1.5b-instruct", "auto") == "auto"  # falls back to bf16's int4 choice
    monkeypatch.setattr(int4_cpu, "int8_unavailable", lambda: None)
    assert default_target_weights("qwen2.5-coder-1.5b-instruct", "auto") == INT8_ACTIVATIONS
    assert default_target_weights("qwen2.5-coder-1.5b-instruct", "int4") == "int4"
    assert default_target_weights("smollm2-135m-instruct", "auto") == "auto"
