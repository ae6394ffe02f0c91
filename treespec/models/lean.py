"""A lean forward pass for Llama-family decoders (`LeanDecoder`): transformers' arithmetic in fewer steps.

A draft's passes are small (1-16 tokens) and many, so what surrounds the matrix products counts: transformers'
decoder layers go through keyword plumbing, hooks, cache objects and mask helpers per layer. `LeanDecoder` runs the
same operations on the same modules (RMSNorm as transformers computes it, the model's own rotary embedding and
activation, `attention.grouped_query_attention` over the preallocated cache) in one loop, and with 4-bit weights
(`treespec.models.quantize`) multiplies q/k/v and gate/up as one matrix each (`quantize.concat_int4`). On the 4-bit Qwen2.5
0.5B draft (bf16, 300 cached tokens) one pass took 11.7 / 12.5 / 15.6 / 26.5 ms for 1 / 2 / 4 / 8 tokens against
14.3 / 15.9 / 18.4 / 29.5 ms through transformers' modules, with the same hidden states (AMD EPYC, 2 cores,
avx512_bf16, 2026-12-02).

Supported: `LlamaForCausalLM` and `Qwen2ForCausalLM`-shaped models loaded with SDPA attention, in eval mode,
without sliding attention windows, hooks or accelerate dispatch (`lean_unsupported` says why not otherwise), and
models that name a stack of such layers themselves through `decoder_parts()` (an EAGLE head: no embeddings, no final
norm; `LeanDecoder.run` takes the layers' inputs and `treespec.drafters.eagle.EagleDrafter` drafts through it).
`treespec.drafters.causal_lm.CausalLMDrafter` runs every draft pass through it when it can, the prompt's included
(`lean=False` turns it off); the engine runs the target's tree passes of any number of rows through it (the Qwen2.5
1.5B, bf16 on oneDNN-reordered weights, 1 token: 95.8 against 100.3 ms, same machine), while the target's prompt
prefill stays transformers' causal pass, as in `generate`.
With `treespec_sdpa` on a CPU the operations are transformers' own, so are the target's outputs; with stock `sdpa`
(or on CUDA) transformers copies the cache per query head instead, equal up to float rounding.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from treespec.models.attention import exact_attention, group_mask, grouped_query_attention, in_float64
from treespec.models.exact import ExactRMSNorm, exact_rms_norm
from treespec.models.native_pass import NativePass, native_unsupported
from treespec.models.quantize import Int4Linear, Int6Linear, concat_int4

MODEL_TYPES = ("llama", "qwen2")
ATTENTIONS = ("sdpa", "treespec_sdpa")  # implementations whose arithmetic grouped_query_attention is
_DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H] -> weight * x / rms(x), the variance in fp32 and the product in x's dtype (transformers' RMSNorm)."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [..., n, d] with cos/sin [..., n, d] (rotate-half convention)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def _foreign_hooks(module: torch.nn.Module) -> list:
    """The module's forward hooks other than transformers' output-capturing ones: transformers installs those on a
    model's layers the first time it is asked for hidden states (an EAGLE or Medusa prefill) and leaves them there,
    inactive unless transformers itself is collecting outputs, which a lean pass never asks it to."""
    return [hook for hook in module._forward_hooks.values()
            if getattr(hook, "__module__", "") != "transformers.utils.output_capturing"]


def decoder_parts(model: torch.nn.Module) -> DecoderParts | None:
    """The pieces a `LeanDecoder` runs: a causal LM's (`model.model`: embeddings, layers, rotary embedding, final
    norm), or those a model names itself through a `decoder_parts()` method (an EAGLE head: its layers and rotary
    embedding, no embeddings and no final norm); None for anything else."""
    own = getattr(model, "decoder_parts", None)
    if callable(own):
        return own()
    decoder = getattr(model, "model", None)
    if decoder is None or not hasattr(decoder, "layers") or not hasattr(decoder, "rotary_emb"):
        return None
    return DecoderParts(list(decoder.layers), decoder.rotary_emb, getattr(decoder, "embed_tokens", None),
                        getattr(decoder, "norm", None))


def lean_unsupported(model: torch.nn.Module) -> str | None:
    """Why `LeanDecoder` cannot run `model`, or None when it can."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    parts = decoder_parts(model)
    if model_type not in MODEL_TYPES and (parts is None or not parts.layers_only):
        return f"model type {model_type!r} (supported: {', '.join(MODEL_TYPES)})"
    attention = getattr(config, "_attn_implementation", None)
    if attention not in ATTENTIONS:
        return f"attention implementation {attention!r} (the lean pass computes {', '.join(ATTENTIONS)})"
    if parts is None or (not parts.layers_only and (parts.embed is None or parts.norm is None)):
        return "not a decoder with layers and a rotary embedding"
    if model.training:
        return "training mode (dropout)"
    if getattr(model, "hf_device_map", None) or any(
            _foreign_hooks(module) or module._forward_pre_hooks or hasattr(module, "_hf_hook") for module in model.modules()):
        return "forward hooks or accelerate dispatch, which a lean pass would skip"
    if len(parts.layers) != config.num_hidden_layers:
        return f"{len(parts.layers)} layers where the config says {config.num_hidden_layers}"
    for layer in parts.layers:
        attention = layer.self_attn
        if getattr(attention, "sliding_window", None) is not None:
            return "sliding attention windows"
        if not all(hasattr(attention, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return "attention without q/k/v/o projections"
        if not all(hasattr(layer.mlp, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            return "an MLP other than gate/up/down"
    return None


class Joined:
    """x -> cat([layer(x) for layer in layers], -1) as few products: each run of neighbouring 4-bit layers that
    `concat_int4` can join is one (q/k/v, gate/up); `parts` are the products, in output order."""

    def __init__(self, layers: Sequence[torch.nn.Module]):
        self.parts: list[torch.nn.Module] = []
        runs: list[list[torch.nn.Module]] = []
        for layer in layers:
            if runs and isinstance(layer, Int4Linear) and isinstance(runs[-1][-1], Int4Linear):
                runs[-1].append(layer)
            else:
                runs.append([layer])
        for run in runs:
            fused = concat_int4(run) if len(run) > 1 else None
            self.parts += [fused] if fused is not None else run

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.parts) == 1:
            return self.parts[0](x)
        return torch.cat([part(x) for part in self.parts], -1)


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor  # [H]
    input_eps: float
    attention_norm: torch.Tensor  # [H]
    attention_eps: float
    qkv: Joined  # [M, H] -> [M, (heads + 2 kv_heads) * d]
    out: torch.nn.Module  # o_proj
    gate_up: Joined  # [M, H] -> [M, 2 I]
    down: torch.nn.Module
    act: Callable[[torch.Tensor], torch.Tensor]
    scale: float
    exact: bool  # attention in float64 (attention.exact_attention: a 4-bit o_proj rounds its input to bf16)
    norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]  # rms_norm, or exact_rms_norm (models.exact)


@dataclass(frozen=True)
class DecoderParts:
    """What a `LeanDecoder` is built from: decoder layers (Llama-shaped), the rotary embedding, and the token
    embedding and final norm (both None for a stack of layers alone, such as an EAGLE head's)."""

    layers: list
    rotary: torch.nn.Module
    embed: torch.nn.Module | None = None
    norm: torch.nn.Module | None = None

    @property
    def layers_only(self) -> bool:
        return self.embed is None and self.norm is None


def _norm_of(*modules: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]:
    """The function the norm modules compute: `exact_rms_norm` when all are `ExactRMSNorm`, else `rms_norm`."""
    return exact_rms_norm if all(isinstance(module, ExactRMSNorm) for module in modules) else rms_norm


class LeanDecoder:
    """The decoder stack of a Llama-family causal LM as one loop; see the module docstring."""

    def __init__(self, model: torch.nn.Module):
        reason = lean_unsupported(model)
        if reason is not None:
            raise ValueError(f"LeanDecoder cannot run this model: {reason}")
        parts = decoder_parts(model)
        first = parts.layers[0].self_attn
        self.head_dim = first.head_dim
        self.heads = first.q_proj.out_features // self.head_dim
        self.kv_heads = first.k_proj.out_features // self.head_dim
        self.intermediate = parts.layers[0].mlp.gate_proj.out_features
        self.embed = parts.embed  # None: the caller passes embeddings (`run`)
        self.rotary = parts.rotary
        self.hidden = parts.layers[0].input_layernorm.weight.shape[0]
        if parts.norm is None:  # the last layer's output as it is
            self.final_norm, self.final_eps, self.final_norm_function = None, 0.0, None
        else:
            self.final_norm, self.final_eps = parts.norm.weight, parts.norm.variance_epsilon
            self.final_norm_function = _norm_of(parts.norm)
        self.layers = [
            _Layer(layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon,
                   layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon,
                   Joined([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]),
                   layer.self_attn.o_proj, Joined([layer.mlp.gate_proj, layer.mlp.up_proj]), layer.mlp.down_proj,
                   layer.mlp.act_fn, layer.self_attn.scaling, exact_attention(layer.self_attn),
                   _norm_of(layer.input_layernorm, layer.post_attention_layernorm))
            for layer in parts.layers
        ]
        self.native_unsupported = native_unsupported(self)  # why the pass runs as the torch loop below, or None
        self.native = NativePass(self) if self.native_unsupported is None else None

    def __call__(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor, cache,
                 keep: Sequence[int] = (), layers: Sequence[int] | None = None
                 ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """input_ids [B, M], position_ids [B, M], mask [B or 1, 1, M, L + M] additive (L cached slots), cache: a
        `treespec.decode.cache.new_cache` whose layers take the new keys/values -> (last hidden states [B, M, H],
        normed; {i: the hidden states [B, M, H] after the first i layers, for i in `keep`}, 0 being the embeddings).
        layers: the indices of the layers to run, ascending (None: all); the others are skipped (the residual stream
        passes them unchanged), the j-th layer run uses `cache.layers[j]`, and `keep` must be empty
        (treespec.models.layer_skip)."""
        if self.embed is None:
            raise ValueError("this LeanDecoder runs a stack of layers without embeddings: call run() with them")
        rows, m = input_ids.shape
        return self.run(self.embed(input_ids.reshape(-1)).view(rows, m, -1), position_ids, mask, cache, keep, layers)

    def run(self, embeds: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor, cache,
            keep: Sequence[int] = (), layers: Sequence[int] | None = None
            ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """`__call__` from the layers' inputs embeds [B, M, H] instead of token ids; without a final norm (an EAGLE
        head's stack) the last layer's output comes back as it is."""
        rows, m, d = embeds.shape[0], embeds.shape[1], self.head_dim
        if layers is not None and keep:
            raise ValueError("intermediate states are kept only when every layer runs")
        run = range(len(self.layers)) if layers is None else layers
        x = embeds.reshape(rows * m, -1)  # [B M, H]: rows flattened for the matrix products
        cos, sin = self.rotary(x, position_ids)  # [B, M, d]
        if self.native is not None and x.dtype == torch.float32 and self.native.usable(cache, rows, run):
            return self.native(x, cos, sin, mask, cache, rows, m, keep, run)
        kept = {0: x.view(rows, m, -1)} if 0 in keep else {}
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, M, d]: the same for every head
        q_end, k_end = self.heads * d, (self.heads + self.kv_heads) * d
        mask = group_mask(mask, self.heads // self.kv_heads)  # once for every layer
        exact_mask = in_float64(mask) if any(layer.exact for layer in self.layers) else None
        for slot, index in enumerate(run):
            layer = self.layers[index]
            qkv = layer.qkv(layer.norm(x, layer.input_norm, layer.input_eps)).view(rows, m, -1)  # [B, M, (h + 2 kv) d]
            query = rotate(qkv[..., :q_end].view(rows, m, self.heads, d).transpose(1, 2), cos, sin)  # [B, heads, M, d]
            key = rotate(qkv[..., q_end:k_end].view(rows, m, self.kv_heads, d).transpose(1, 2), cos, sin)
            value = qkv[..., k_end:].view(rows, m, self.kv_heads, d).transpose(1, 2)
            keys, values = cache.layers[slot].update(key, value)  # [B, kv_heads, L + M, d]
            attended = grouped_query_attention(query, keys, values, exact_mask if layer.exact else mask,
                                               scale=layer.scale, exact=layer.exact)  # [B, heads, M, d]
            x = x + layer.out(attended.transpose(1, 2).reshape(rows * m, self.heads * d))
            gate_up = layer.gate_up(layer.norm(x, layer.attention_norm, layer.attention_eps))  # [B M, 2 I]
            x = x + layer.down(layer.act(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate:])
            if index + 1 in keep:
                kept[index + 1] = x.view(rows, m, -1)

        x = x.view(rows, m, -1)
        if self.final_norm is None:
            return x, kept
        return self.final_norm_function(x, self.final_norm, self.final_eps), kept


def _sources(model: torch.nn.Module) -> tuple[list, list]:
    """What a built decoder was made from: the modules and tensors it holds or copied (embedding, rotary embedding,
    norms, projections, 4-bit tensors), and the in-place versions of those tensors with the activations the
    quantized projections take (`quantize.set_activations`)."""
    parts = decoder_parts(model)
    objects = [parts.rotary] + [o for o in (parts.embed, parts.norm) if o is not None]
    if parts.norm is not None:
        objects.append(parts.norm.weight)
    for layer in parts.layers:
        objects += [layer.input_layernorm.weight, layer.post_attention_layernorm.weight, layer.mlp.act_fn]
        for module in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
                       layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
            objects.append(module)
            if isinstance(module, Int4Linear):
                objects += [t for t in (module.packed, module.scale_zero, module.bias, module.kernel_codes,
                                        module.kernel_scale, module.kernel_minimum) if t is not None]
            elif isinstance(module, Int6Linear):
                objects += module.product_tensors()
    versions = [tensor_version(o) for o in objects if isinstance(o, torch.Tensor)]
    versions += [o.activations for o in objects if isinstance(o, (Int4Linear, Int6Linear))]
    return objects, versions


def tensor_version(tensor: torch.Tensor) -> int | None:
    """The tensor's in-place version counter (None for inference tensors, which keep none)."""
    return None if tensor.is_inference() else tensor._version


def lean_decoder(model: torch.nn.Module) -> LeanDecoder | None:
    """The model's `LeanDecoder`, built once per model (again when a module or tensor it was made from is replaced or
    changed in place), or None when `lean_unsupported(model)`."""
    if lean_unsupported(model) is not None:
        return None
    objects, versions = _sources(model)
    kept = _DECODERS.get(model)
    if (kept is None or len(kept[0]) != len(objects) or any(a is not b for a, b in zip(kept[0], objects))
            or kept[1] != versions):
        kept = (objects, versions, LeanDecoder(model))  # holding the sources: no id reuse can fake a match
        _DECODERS[model] = kept
    return kept[2]
