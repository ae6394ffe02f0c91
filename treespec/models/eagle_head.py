"""An EAGLE-style draft head that reads the target's hidden state (Li et al. 2024): the architecture.

Draft position j consumes (f_{j-1}, x_j): the target's feature at the previous position (its last hidden
state, after the final norm: what its LM head reads) and the embedding of token x_j (the target's own
embedding table, shared at run time). `fc` fuses them (2H -> H), one Llama decoder layer (or
`config.num_hidden_layers` of them, stacked) attends over the earlier positions, and the output h_j
estimates f_j; an LM head over a reduced vocabulary turns h_j into logits for x_{j+1}. Inside a tree the
head feeds its own h as the feature of a drafted node. After each verification the accepted tokens are
re-encoded with the target's true features.

A fused head (EAGLE-3's features, Li et al. 2025) lists target layers in `config.feature_layers`: its
feature of an accepted position is `fuse` (one projection, k*H -> H) of the target's hidden states after
those layers, each through the target's final norm (index L, the last layer, is the final feature
itself). Deeper in a tree it reads its own outputs, as the single-layer head does. `feature_layers = []`
(the default, and what heads saved before the field existed load as) is the single-layer head above.
The engine asks the target for all hidden states only when a drafter's `target_layers` is non-empty
(`target_features` selects and normalises them).

Importing this module registers the architecture (`model_type = "treespec_eagle"`) with transformers.
The head cannot decode on its own (it needs the target's features), so transformers' assisted generation
cannot use it; treespec's engine drafts with it through `treespec.drafters.eagle.EagleDrafter`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, LlamaConfig, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaPreTrainedModel, LlamaRotaryEmbedding

from treespec.errors import ConfigError
from treespec.models import attention
from treespec.models.lean import DecoderParts


class EagleDraftConfig(LlamaConfig):
    """LlamaConfig (one decoder layer of the target's shape) plus `output_token_ids` (K ids) and
    `feature_layers` (target hidden-state indices fused into the feature; [] = the last hidden state)."""

    model_type = "treespec_eagle"

    def __init__(self, output_token_ids: list[int] | None = None, feature_layers: list[int] | None = None, **kwargs):
        self.output_token_ids = list(output_token_ids) if output_token_ids is not None else []
        self.feature_layers = [int(i) for i in feature_layers] if feature_layers else []
        super().__init__(**kwargs)


def final_norm(target: PreTrainedModel) -> nn.Module:
    """The target's final norm (what turns its last layer's output into the feature its LM head reads)."""
    base = target.base_model
    for name in ("norm", "ln_f", "final_layernorm"):
        if isinstance(getattr(base, name, None), nn.Module):
            return getattr(base, name)
    raise ConfigError(f"cannot find the final norm of {type(base).__name__}: a fused EAGLE head needs it")


def target_features(target: PreTrainedModel, output, layers: Sequence[int]) -> torch.Tensor:
    """The features a head reads from one target forward `output` (run with output_hidden_states=bool(layers)):
    [B, N, H] its last hidden state when `layers` is empty, else [B, N, k*H] the hidden states after each listed
    layer (0 = the embeddings) through the final norm, concatenated in order (index L is the last hidden state)."""
    if not layers:
        return output.last_hidden_state
    if output.hidden_states is None:
        raise ValueError("the target pass was run without output_hidden_states")
    return fused_features(target, output.last_hidden_state, output.hidden_states, layers)


def fused_features(target: PreTrainedModel, last_hidden: torch.Tensor, states, layers: Sequence[int]) -> torch.Tensor:
    """[..., k*H]: for each i in `layers`, `states[i]` (the hidden states after i layers, [..., H]) through the final
    norm, or `last_hidden` for the last layer, concatenated in order."""
    last, norm = target.config.get_text_config().num_hidden_layers, final_norm(target)
    return torch.cat([last_hidden if i == last else norm(states[i]) for i in layers], dim=-1)


def check_feature_layers(draft_config: EagleDraftConfig, target: PreTrainedModel) -> None:
    """ConfigError when the head's width or fused layers do not fit the target."""
    text = target.config.get_text_config()
    if draft_config.hidden_size != text.hidden_size:
        raise ConfigError(f"the EAGLE draft's width ({draft_config.hidden_size}) differs from the target's "
                          f"({text.hidden_size}): it was trained for another target")
    bad = [i for i in draft_config.feature_layers if not 0 <= i <= text.num_hidden_layers]
    if bad:
        raise ConfigError(f"the EAGLE draft fuses target layers {bad}, outside [0, {text.num_hidden_layers}] for this "
                          "target: it was trained for another target")


class EagleDraftModel(LlamaPreTrainedModel):
    """[fuse(k*H -> H) for a fused head] + fc(2H -> H) + `num_hidden_layers` decoder layers (`layer`, then
    `more_layers`) + an LM head over `output_token_ids`."""

    config_class = EagleDraftConfig

    def __init__(self, config: EagleDraftConfig):
        super().__init__(config)
        if not config.output_token_ids:
            raise ValueError("EagleDraftConfig.output_token_ids must list the draft's output tokens")
        if config._attn_implementation is None:
            config._attn_implementation = attention.NAME
        hidden = config.hidden_size
        if config.feature_layers:
            self.fuse = nn.Linear(len(config.feature_layers) * hidden, hidden, bias=False)
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        if config.num_hidden_layers < 1:
            raise ValueError(f"an EAGLE head needs at least one decoder layer, got {config.num_hidden_layers}")
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.more_layers = nn.ModuleList(LlamaDecoderLayer(config, layer_idx=i) for i in range(1, config.num_hidden_layers))
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.lm_head = nn.Linear(hidden, len(config.output_token_ids), bias=False)
        self.register_buffer("output_ids", torch.tensor(config.output_token_ids, dtype=torch.long), persistent=True)
        self.post_init()

    @property
    def fused(self) -> bool:
        return bool(self.config.feature_layers)

    def decoder_parts(self) -> DecoderParts:
        """The decoder layers and rotary embedding, for `treespec.models.lean.LeanDecoder` (no embeddings: the
        layers read `fc`'s output; no final norm: the last layer's output is the feature)."""
        return DecoderParts([self.layer, *self.more_layers], self.rotary_emb)

    def fuse_features(self, target_features: torch.Tensor) -> torch.Tensor:
        """[..., k*H] target features (see `target_features`) -> [..., H] the feature the head reads; a
        single-layer head reads the target's feature as it is (returned unchanged)."""
        if not self.fused:
            return target_features
        weight = getattr(self.fuse, "weight", None)  # a 4-bit layer has none and takes any dtype
        return self.fuse(target_features if weight is None else target_features.to(weight.dtype))

    def forward(self, features: torch.Tensor, token_embeds: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor, cache: Cache | None = None) -> torch.Tensor:
        """features (fused, or the head's own outputs), token_embeds [B, L, H]; position_ids [B, L]; additive
        mask [B or 1, 1, L, past + L]. Returns the head's output features h [B, L, H]."""
        x = self.fc(torch.cat([features.to(token_embeds.dtype), token_embeds], dim=-1))
        rotary = self.rotary_emb(x, position_ids)
        for layer in (self.layer, *self.more_layers):
            x = layer(x, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                      use_cache=cache is not None, position_embeddings=rotary)
        return x

    def reduced_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., K] logits over `output_ids`, in `hidden`'s dtype (an output layer kept in another
        precision, `set_output_dtype`, reads `hidden` cast to its own)."""
        weight = getattr(self.lm_head, "weight", None)  # a 4-bit output layer has none: it returns hidden's dtype
        if weight is None or hidden.dtype == weight.dtype:
            return self.lm_head(hidden)
        head_dtype = weight.dtype
        return self.lm_head(hidden.to(head_dtype)).to(hidden.dtype)

    def expand_logits(self, reduced: torch.Tensor) -> torch.Tensor:
        """[..., K] -> [..., V] with -inf outside the reduced vocabulary."""
        full = reduced.new_full((*reduced.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.scatter_(-1, self.output_ids.expand(*reduced.shape[:-1], -1), reduced)


def set_output_dtype(head: EagleDraftModel, dtype: torch.dtype) -> EagleDraftModel:
    """The head's output layer (lm_head [K, H], its largest matrix) in `dtype`, the rest as it is (in place; plain
    linear layouts only). Drafting only: a bf16 output layer reads h rounded to bf16 and returns logits in the
    body's dtype; training keeps one dtype."""
    head.lm_head.to(dtype)
    return head


def init_eagle_from_target(target: PreTrainedModel, output_token_ids: Sequence[int], *, init_layer: int | None = None,
                           feature_layers: Sequence[int] = (), layers: int = 1):
    """An EAGLE head for a Llama-style target: `layers` decoder layers (the first copied from the target's layer
    `init_layer`, or freshly initialised when None: small updates, so the head starts close to h = f + e; the
    others always fresh, so that a head grown from a trained one starts close to it),
    the target's output rows for `output_token_ids` as its LM head, and `fc` initialised to pass the feature
    through plus the token embedding. With `feature_layers` (target hidden-state indices, see
    `target_features`) the head is a fused one; its `fuse` starts as the selection of the
    last layer's feature when the last layer is listed (the single-layer head's input), else as the mean."""
    tcfg = target.config
    fields = {k: v for k, v in tcfg.to_dict().items()
              if k not in ("architectures", "model_type", "transformers_version", "_name_or_path", "quantization_config")}
    fields.update(num_hidden_layers=layers, tie_word_embeddings=False, output_token_ids=list(output_token_ids),
                  feature_layers=list(feature_layers), architectures=["EagleDraftModel"])
    head = EagleDraftModel(EagleDraftConfig(**fields))
    check_feature_layers(head.config, target)
    hidden = tcfg.hidden_size
    with torch.no_grad():
        if init_layer is not None:
            head.layer.load_state_dict(target.model.layers[init_layer].state_dict())
        head.lm_head.weight.copy_(target.lm_head.weight[head.output_ids])
        head.fc.weight.copy_(torch.cat([torch.eye(hidden), torch.eye(hidden)], dim=1))
        head.fc.bias.zero_()
        if head.fused:
            layers = list(feature_layers)
            last = tcfg.num_hidden_layers
            chosen = [j for j, i in enumerate(layers) if i == last][:1] or list(range(len(layers)))
            weight = torch.zeros(hidden, len(layers) * hidden)
            for j in chosen:
                weight[:, j * hidden:(j + 1) * hidden] = torch.eye(hidden) / len(chosen)
            head.fuse.weight.copy_(weight)
    return head


AutoConfig.register(EagleDraftConfig.model_type, EagleDraftConfig, exist_ok=True)
AutoModel.register(EagleDraftConfig, EagleDraftModel, exist_ok=True)
