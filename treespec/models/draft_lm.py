"""A small Llama-style draft model with a factorised input embedding and a reduced output vocabulary.

Why this shape (docs/algorithms.md, "What costs what"): on a CPU a draft step is dominated by its LM head, so the
draft scores only `output_token_ids` (the tokens the target actually writes most), and its input
embedding over the full vocabulary is factorised (V x r, r x H) to keep the checkpoint small.
Its forward still returns logits over the *full* target vocabulary (-inf outside the reduced set), so
it is an ordinary causal LM for any caller (treespec's engine, transformers' assisted generation):
q is simply zero outside the reduced set, and every verification rule stays lossless.

Importing this module registers the architecture (`model_type = "treespec_draft"`) with transformers'
Auto classes, so `AutoModelForCausalLM.from_pretrained(dir)` loads a saved draft once treespec is imported.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, LlamaConfig
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.llama.modeling_llama import LlamaModel, LlamaPreTrainedModel


class TreespecDraftConfig(LlamaConfig):
    """LlamaConfig plus `embed_rank` (r of the factorised embedding) and `output_token_ids` (K ids)."""

    model_type = "treespec_draft"

    def __init__(self, embed_rank: int = 64, output_token_ids: list[int] | None = None, **kwargs):
        self.embed_rank = embed_rank
        self.output_token_ids = list(output_token_ids) if output_token_ids is not None else []
        super().__init__(**kwargs)


class FactorisedEmbedding(nn.Module):
    """Token embedding `up(low(ids))`: [*, ] int -> [*, H], with low: V x r and up: r x H."""

    def __init__(self, vocab_size: int, rank: int, hidden_size: int):
        super().__init__()
        self.low = nn.Embedding(vocab_size, rank)
        self.up = nn.Linear(rank, hidden_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.up(self.low(input_ids))


class TreespecDraftForCausalLM(LlamaPreTrainedModel, GenerationMixin):
    """Llama decoder layers + factorised embedding + LM head over `config.output_token_ids`."""

    config_class = TreespecDraftConfig
    _tied_weights_keys: dict[str, str] = {}

    def __init__(self, config: TreespecDraftConfig):
        super().__init__(config)
        if not config.output_token_ids:
            raise ValueError("TreespecDraftConfig.output_token_ids must list the draft's output tokens")
        self.model = LlamaModel(config)
        self.model.embed_tokens = FactorisedEmbedding(config.vocab_size, config.embed_rank, config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, len(config.output_token_ids), bias=False)
        self.register_buffer(
            "output_ids", torch.tensor(config.output_token_ids, dtype=torch.long), persistent=True
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def reduced_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., K] logits over `output_ids` only (what training uses)."""
        return self.lm_head(hidden_states)

    def expand_logits(self, reduced: torch.Tensor) -> torch.Tensor:
        """[..., K] -> [..., V] with -inf outside the reduced vocabulary."""
        full = reduced.new_full((*reduced.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.scatter_(-1, self.output_ids.expand(*reduced.shape[:-1], -1), reduced)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden = outputs.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden = hidden[:, -logits_to_keep:]
        elif isinstance(logits_to_keep, torch.Tensor):
            hidden = hidden[:, logits_to_keep]
        logits = self.expand_logits(self.reduced_logits(hidden))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=outputs.cache)


AutoConfig.register(TreespecDraftConfig.model_type, TreespecDraftConfig, exist_ok=True)
AutoModelForCausalLM.register(TreespecDraftConfig, TreespecDraftForCausalLM, exist_ok=True)
