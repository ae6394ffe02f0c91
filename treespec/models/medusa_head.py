"""Medusa heads (Cai et al. 2024): K small heads on the target's last hidden state, each guessing one token further.

The target's last hidden state h_t (after its final norm: what its LM head reads) predicts x_{t+1}. Head k
(k = 1..K) maps h_t to a guess of x_{t+k+1}: a residual block h + SiLU(W_k h + b_k) followed by the target's own LM
head, shared at run time and neither trained nor stored here, so the heads hold K x (H^2 + H) parameters. The heads
see neither each other nor the tokens in between: in a tree, every node at depth d below the root gets the same
proposal, head d+1's, whatever its parent (treespec.drafters.medusa.MedusaDrafter).

The heads may carry a proposal vocabulary (`MedusaConfig.proposal_vocab`): on a CPU the root call's cost is reading
the LM head (49,152 x 576 for SmolLM2), so proposing from the few thousand most frequent tokens cuts it to a
fraction; q is then renormalised over them and verification stays lossless (treespec.drafters.vocab).

Importing this module registers the architecture (`model_type = "treespec_medusa"`) with transformers' Auto
classes (`AutoModel`); the heads cannot decode on their own (they need the target's features and LM head).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

from treespec.errors import ConfigError


class MedusaConfig(PretrainedConfig):
    """num_heads K, hidden_size H (the target's width), vocab_size V (the target's vocabulary), `target`, the name
    of the target the heads were trained for (informative: the check is on H and V), and `proposal_vocab` S: the
    heads propose from S token ids stored with them (`MedusaHeads.vocab`, the most frequent in their training
    data), 0 = all V."""

    model_type = "treespec_medusa"

    def __init__(self, num_heads: int = 4, hidden_size: int = 576, vocab_size: int = 49152,
                 target: str | None = None, proposal_vocab: int = 0, **kwargs):
        self.num_heads, self.hidden_size, self.vocab_size = int(num_heads), int(hidden_size), int(vocab_size)
        self.target, self.proposal_vocab = target, int(proposal_vocab)
        super().__init__(**kwargs)


class ResidualBlock(nn.Module):
    """[..., H] -> [..., H]: h + SiLU(W h + b); W and b start at zero, so a fresh head is the identity."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden, bias=True)
        self.act = nn.SiLU()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.act(self.linear(hidden))


class MedusaHeads(PreTrainedModel):
    """K residual blocks (`blocks[k - 1]` is head k); logits come from the target's LM head, passed in."""

    config_class = MedusaConfig
    base_model_prefix = "medusa"
    main_input_name = "hidden"

    def __init__(self, config: MedusaConfig):
        super().__init__(config)
        if config.num_heads < 1:
            raise ConfigError(f"Medusa heads need num_heads >= 1, got {config.num_heads}")
        self.blocks = nn.ModuleList(ResidualBlock(config.hidden_size) for _ in range(config.num_heads))
        # [S] the token ids the heads propose from (proposal_vocab > 0): scoring S rows of the LM head instead of V
        self.register_buffer("vocab", torch.zeros(config.proposal_vocab, dtype=torch.long))
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    def head_hidden(self, hidden: torch.Tensor, heads: list[int] | None = None) -> torch.Tensor:
        """hidden [..., H] (the target's normed last hidden states) -> [..., k, H]: the outputs of `heads`
        (1-based; default all K), before the LM head."""
        chosen = range(1, self.num_heads + 1) if heads is None else heads
        x = hidden.to(self.blocks[0].linear.weight.dtype)
        return torch.stack([self.blocks[k - 1](x) for k in chosen], dim=-2)

    def forward(self, hidden: torch.Tensor, lm_head: nn.Module, heads: list[int] | None = None) -> torch.Tensor:
        """hidden [..., H] and the target's LM head (H -> V) -> logits [..., k, V] of `heads` (1-based; default all
        K), in the LM head's dtype; logits[..., j, :] guesses the token heads[j] + 1 positions after hidden's."""
        out = self.head_hidden(hidden, heads)
        return lm_head(out.to(_weight_dtype(lm_head, out.dtype)))


def _weight_dtype(module: nn.Module, default: torch.dtype) -> torch.dtype:
    weight = getattr(module, "weight", None)
    return weight.dtype if isinstance(weight, torch.Tensor) and weight.is_floating_point() else default


def check_target(config: MedusaConfig, target: PreTrainedModel) -> None:
    """ConfigError when the heads cannot read this target (another width or vocabulary)."""
    text = target.config.get_text_config()
    if config.hidden_size != text.hidden_size or config.vocab_size != text.vocab_size:
        trained = f" (trained for {config.target})" if config.target else ""
        raise ConfigError(f"the Medusa heads{trained} read hidden states of width {config.hidden_size} over "
                          f"{config.vocab_size} tokens, the target has width {text.hidden_size} and "
                          f"{text.vocab_size} tokens: they were trained for another target")


def with_proposal_vocab(heads: MedusaHeads, vocab: torch.Tensor) -> MedusaHeads:
    """The same heads proposing from the token ids `vocab` [S] (sorted, distinct; empty: the whole vocabulary)."""
    ids = torch.as_tensor(vocab, dtype=torch.long).flatten()
    if ids.numel() and (ids.unique().numel() != ids.numel() or int(ids.min()) < 0
                        or int(ids.max()) >= heads.config.vocab_size):
        raise ConfigError(f"a proposal vocabulary is distinct token ids in [0, {heads.config.vocab_size})")
    heads.config.proposal_vocab = int(ids.numel())
    heads.vocab = ids.sort().values.to(heads.vocab.device)
    return heads


def new_heads(target: PreTrainedModel, num_heads: int, target_name: str | None = None) -> MedusaHeads:
    """K fresh heads for `target` (each starts as the identity: the target's own next-token guess)."""
    text = target.config.get_text_config()
    return MedusaHeads(MedusaConfig(num_heads=num_heads, hidden_size=text.hidden_size, vocab_size=text.vocab_size,
                                    target=target_name, architectures=["MedusaHeads"]))


AutoConfig.register(MedusaConfig.model_type, MedusaConfig, exist_ok=True)
AutoModel.register(MedusaConfig, MedusaHeads, exist_ok=True)
