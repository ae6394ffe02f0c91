"""Drafters: what tree policies call to get draft logits, one tree level per forward pass.

Protocol (like transformers' CandidateGenerator, split into the calls a tree needs):
  reset(prompt_ids, prefix_hidden)        start a new sequence (prefix_hidden: the target's last hidden
                                          states of prompt_ids[:-1], for drafters that read them)
  root_logits(root_token) -> [V]          logits after the root (the last accepted token)
  node_logits(nodes, tokens, parents) -> [M, V]   logits after M new tree nodes of one level
  observe(outcome)                        the verified result; keep what was accepted
`StepOutcome` also carries the target's hidden states along the accepted path, for drafters that read
them (`treespec.eagle.EagleDrafter`); the engine computes them only for drafters with
`wants_target_hidden`, and for a drafter whose `target_layers` lists target layers (a fused EAGLE head) those
layers' states, fused by `treespec.eagle.target_features`. `ModelDrafter` ignores them.

`ModelDrafter` runs any causal LM that shares the target's tokenizer, with its own KV cache. Its cache
holds the committed tokens, then (during a step) `pending` tokens accepted earlier but not yet seen by
the draft (the last accepted node when it was a leaf), the root, and one slot per forwarded tree node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel

from treespec.cache import cache_length, commit, new_cache
from treespec.mask import additive


@dataclass(frozen=True)
class StepOutcome:
    accepted_nodes: tuple[int, ...]  # root first
    accepted_tokens: tuple[int, ...]  # tokens of accepted_nodes
    bonus: int
    target_hidden: torch.Tensor | None = None  # [A, F] target features at accepted_nodes, if requested (F = H: last layer)


class Drafter(Protocol):
    wants_target_hidden: bool

    def reset(self, prompt_ids: Sequence[int], prefix_hidden: torch.Tensor | None = None) -> None: ...

    def root_logits(self, root_token: int) -> torch.Tensor: ...

    def node_logits(self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int]) -> torch.Tensor: ...

    def observe(self, outcome: StepOutcome) -> None: ...


class ModelDrafter:
    """A causal-LM draft with its own KV cache; see module docstring for the cache layout."""

    wants_target_hidden = False

    def __init__(self, model: PreTrainedModel, max_length: int):
        self.model = model
        self.max_length = max_length
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype

    def reset(self, prompt_ids: Sequence[int], prefix_hidden: torch.Tensor | None = None) -> None:
        self.cache = new_cache(self.model, self.max_length)
        self.committed = 0  # slots holding tokens accepted and kept
        self.pending = [int(t) for t in prompt_ids[:-1]]
        self._slot: dict[int, int] = {}
        self._parent: dict[int, int] = {}
        self._depth: dict[int, int] = {}

    def _forward(self, tokens: Sequence[int], positions: Sequence[int], visible: torch.Tensor) -> torch.Tensor:
        """Run M new tokens over the cache; visible [M, L + M] bool. Returns logits [M, V]."""
        out = self.model(
            input_ids=torch.tensor([list(tokens)], device=self.device),
            position_ids=torch.tensor([list(positions)], device=self.device),
            attention_mask=additive(visible.to(self.device), self.dtype),
            cache=self.cache,
            use_cache=True,
        )
        return out.logits[0]

    def root_logits(self, root_token: int) -> torch.Tensor:
        chain = self.pending + [int(root_token)]
        length, m = self.committed, len(chain)
        visible = torch.ones(m, length + m, dtype=torch.bool)
        visible[:, length:] = torch.ones(m, m, dtype=torch.bool).tril()
        logits = self._forward(chain, range(length, length + m), visible)
        self._root_slot = length + m - 1
        self._slot, self._parent, self._depth = {0: self._root_slot}, {0: -1}, {0: 0}
        return logits[-1]

    def node_logits(self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        length, m = cache_length(self.cache), len(nodes)
        visible = torch.zeros(m, length + m, dtype=torch.bool)
        visible[:, : self._root_slot] = True  # committed prefix and pending tokens
        for j, (node, parent) in enumerate(zip(nodes, parents)):
            ancestor = parent
            while ancestor >= 0:
                visible[j, self._slot[ancestor]] = True
                ancestor = self._parent[ancestor]
            visible[j, length + j] = True
            self._parent[node], self._depth[node] = parent, self._depth[parent] + 1
        positions = [self._root_slot + self._depth[node] for node in nodes]
        logits = self._forward(tokens, positions, visible)
        for j, node in enumerate(nodes):
            self._slot[node] = length + j
        return logits

    def observe(self, outcome: StepOutcome) -> None:
        path = list(zip(outcome.accepted_nodes[1:], outcome.accepted_tokens[1:]))
        seen = [self._slot[node] - (self._root_slot + 1) for node, _ in path if node in self._slot]
        prefix = self._root_slot + 1  # committed + pending + root are all kept
        commit(self.cache, prefix, seen)
        self.committed = prefix + len(seen)
        self.pending = [token for node, token in path if node not in self._slot]
