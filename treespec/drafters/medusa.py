"""The drafter of Medusa heads (treespec.models.medusa_head) for B >= 1 rows: no KV cache of its own.

A step's root is the last accepted token, which the target has not seen yet; h, the target's feature (normed last
hidden state) at the token before the root, is all the heads read: the last accepted node of the previous step
(`StepOutcome.target_hidden[-1]`), or the prompt's second-to-last token at the start (zeros for a one-token prompt).
The root's children get head 1's logits, and every node at depth d gets head d+1's, whatever its parent (the heads
are conditionally independent): the root pass computes all K heads' logits at once (one read of the target's LM
head, whose size sets the cost on a CPU, or of its rows for the heads' proposal vocabulary) and the levels below
read them. The heads propose at most `max_depth` = K levels below the root; the policies cap their trees there
(treespec.drafters.policies.level_limits), and a request deeper is a ConfigError. Proposal probabilities are the
heads' softmax, recorded by the policy like any drafter's, so every verification rule stays lossless.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from treespec.decode.engine import Request, StepOutcome
from treespec.drafters.vocab import SubsetHead
from treespec.errors import ConfigError
from treespec.models.medusa_head import MedusaHeads, check_target


class MedusaDrafter:
    """`MedusaHeads` over right-padded rows (see the module docstring): h [B, H], one feature per row."""

    wants_target_hidden = True
    target_layers: tuple[int, ...] = ()  # the engine's features are the target's last hidden states

    def __init__(self, heads: MedusaHeads, target: PreTrainedModel, vocab: torch.Tensor | None = None):
        """vocab [S]: the token ids to propose from; None: the heads' own proposal vocabulary (all V without one)."""
        check_target(heads.config, target)
        self.heads, self.lm_head = heads, target.get_output_embeddings()
        vocab = heads.vocab if vocab is None and heads.vocab.numel() else vocab
        if vocab is not None:  # the root call reads only these rows of the target's LM head
            self.lm_head = SubsetHead(self.lm_head, target.config.get_text_config(),
                                      torch.as_tensor(vocab, dtype=torch.long).to(heads.vocab.device))
        self.max_depth = heads.config.num_heads
        self.device = next(heads.parameters()).device
        self.hidden_size = heads.config.hidden_size

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        """prefix_features [B, W, H]: row b's first len(prompts[b]) - 1 entries are the target's features of
        prompts[b][:-1]; h of row b is its last one (zeros when the prompt is one token)."""
        self.h = torch.zeros(len(prompts), self.hidden_size, device=self.device)
        for b, prompt in enumerate(prompts):
            if prefix_features is not None and len(prompt) > 1:
                self.h[b] = prefix_features[b, len(prompt) - 2].to(self.device)
        self._depth: list[dict[int, int]] = [{0: 0} for _ in prompts]

    def root_logits(self, roots: Sequence[int]) -> torch.Tensor:
        """[B, V]: head 1's logits, the proposals for the roots' children (every head's are kept for the levels)."""
        self._depth = [{0: 0} for _ in roots]
        self._logits = self.heads(self.h, self.lm_head)  # [B, K, V]
        return self._logits[:, 0]

    def node_logits(self, requests: Sequence[Request | None]) -> list[torch.Tensor]:
        """Per row [m_b, V]: head d+1's logits for each requested node at depth d."""
        out = []
        for b, request in enumerate(requests):
            depths = []
            for node, parent in zip(request[0], request[2]) if request else ():
                self._depth[b][node] = self._depth[b][parent] + 1
                depths.append(self._depth[b][node])
            if depths and max(depths) >= self.max_depth:
                raise ConfigError(f"the Medusa heads propose at most {self.max_depth} levels below the root, the tree "
                                  f"asked for level {max(depths) + 1}: use trees of at most {self.max_depth + 1} levels "
                                  "(root included)")
            out.append(self._logits[b, depths])  # [m_b, V]
        return out

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        """h of each live row becomes the target's feature at its last accepted node (the token before the bonus)."""
        for b, outcome in enumerate(outcomes):
            if outcome.target_hidden is None:
                raise ValueError("MedusaDrafter needs the target's hidden states of the accepted path")
            self.h[b] = outcome.features()[-1].to(self.device)

    absorb = observe  # steps another source drafted (hybrid trees): the same update

    def select(self, rows: Sequence[int]) -> None:
        """Keep only these rows (finished rows leave)."""
        self.h = self.h[list(rows)]
        self._depth = [self._depth[b] for b in rows]
