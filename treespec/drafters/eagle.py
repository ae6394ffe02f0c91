"""The drafter of an EAGLE-style head (treespec.models.eagle_head) for B >= 1 rows; it reads the target's features.

Draft position j consumes (f_{j-1}, x_j): the target's feature at the previous position and the embedding of
token x_j. Cache layout (treespec.drafters.slots, positions = slots + 1): a row's committed pairs, then during a
step its pending pairs (accepted tokens with their true target features), the root's pair, and one slot per
forwarded tree node, whose feature is the head's own output at its parent. `observe` keeps the committed pairs
and the chain (drafted features are replaced by the target's own), and queues the accepted path, with the
target's features along it, as the next step's pending pairs. On steps it did not draft (`absorb`, hybrid trees) it
queues the accepted path and leaves the target's features uncomputed until it drafts again (`_catch_up`: one call
for all the steps it skipped).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from treespec.decode.cache import new_cache
from treespec.decode.engine import PathFeatures, Request, StepOutcome, gather_features
from treespec.drafters.slots import RowSlots
from treespec.models.eagle_head import EagleDraftModel, check_feature_layers
from treespec.models.lean import lean_decoder


class EagleDrafter(RowSlots):
    """An `EagleDraftModel` over right-padded rows (see the module docstring)."""

    wants_target_hidden = True
    position_offset = 1
    _row_state = ("pending_tokens", "pending_features", "root_feature", "_hidden", "_absorbed")

    def __init__(self, draft: EagleDraftModel, target: PreTrainedModel, max_length: int):
        check_feature_layers(draft.config, target)
        self.target_layers = tuple(draft.config.feature_layers)  # what the engine passes as target features
        self.model, self.embed, self.max_length = draft, target.get_input_embeddings(), max_length
        self.lean = lean_decoder(draft)  # the head's layers in one loop (in C for a 4-bit head); None: its modules
        self.device = next(draft.parameters()).device
        self.dtype = next(draft.parameters()).dtype

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        """prefix_features [B, W, F]: row b's first len(prompts[b]) - 1 entries are the target's features of
        prompts[b][:-1] (treespec.models.eagle_head.target_features); None starts every row from zero features."""
        hidden = self.model.config.hidden_size
        self.cache = new_cache(self.model, self.max_length)
        self._begin(len(prompts))
        self.pending_tokens, self.pending_features, self.root_feature = [], [], []
        for b, prompt in enumerate(prompts):
            prefix = len(prompt) - 1
            if prefix_features is not None and prefix > 0:
                features = self.model.fuse_features(prefix_features[b, :prefix].to(self.device))
            else:
                features = torch.zeros(prefix, hidden, device=self.device)
            self.pending_tokens.append([int(t) for t in prompt[1:-1]])
            self.pending_features.append(features[:-1])  # f_0 .. f_{T-3}, paired with x_1 .. x_{T-2}
            self.root_feature.append(features[-1] if prefix else torch.zeros(hidden, device=self.device))
        self._hidden: list[dict[int, torch.Tensor]] = [{} for _ in prompts]
        self._absorbed: list[list] = [[] for _ in prompts]  # per row: target features of steps absorbed, in order

    def pending_lengths(self) -> list[int]:
        """Per row, the accepted tokens its next root pass reads before the root (those it has not seen yet)."""
        return [len(pending) for pending in self.pending_tokens]

    def _run(self, tokens, positions, mask, features):
        embeds = self.embed(tokens).to(self.dtype)
        if self.lean is None:
            return self.model(features.to(self.dtype), embeds, positions, mask, self.cache)
        return self.lean.run(self.model.fc(torch.cat([features.to(self.dtype), embeds], dim=-1)), positions, mask,
                             self.cache)[0]

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.expand_logits(self.model.reduced_logits(hidden))

    def root_logits(self, roots: Sequence[int]) -> torch.Tensor:
        self._catch_up()
        chains = [pending + [int(root)] for pending, root in zip(self.pending_tokens, roots)]
        width = max(len(c) for c in chains)
        if len(chains) == 1:
            features = torch.cat([self.pending_features[0], self.root_feature[0][None]])[None]  # [1, M, H]
        else:
            features = torch.zeros(len(chains), width, self.model.config.hidden_size, device=self.device)
            for b, chain in enumerate(chains):
                features[b, : len(chain)] = torch.cat([self.pending_features[b], self.root_feature[b][None]])
        hidden = self._chain_pass(chains, features)  # [B, H]
        self._hidden = [{0: hidden[b]} for b in range(len(chains))]
        return self._logits(hidden)  # [B, V]

    def node_logits(self, requests: Sequence[Request | None]) -> list[torch.Tensor]:
        width = max(len(r[0]) if r else 0 for r in requests)
        features = torch.zeros(len(requests), width, self.model.config.hidden_size, device=self.device)
        for b, request in enumerate(requests):
            if request and len(request[0]):
                features[b, : len(request[0])] = torch.stack([self._hidden[b][p] for p in request[2]])
        hidden = self._node_pass(requests, features)  # [B, M, H]
        logits = self._logits(hidden)  # [B, M, V]
        out = []
        for b, request in enumerate(requests):
            for j, node in enumerate(request[0] if request else ()):
                self._hidden[b][node] = hidden[b, j]
            out.append(logits[b, : len(request[0]) if request else 0])
        return out

    def absorb(self, outcomes: Sequence[StepOutcome]) -> None:
        """Steps the head did not draft (another source's tree): each row's root, paired with its feature, and the
        accepted path, with the target's features (computed at `_catch_up`), join the pending pairs."""
        for b, outcome in enumerate(outcomes):
            if outcome.target_hidden is None:
                raise ValueError("EagleDrafter needs the target's hidden states of the accepted path")
            self.pending_tokens[b] = self.pending_tokens[b] + [int(t) for t in outcome.accepted_tokens]
            self._absorbed[b].append(outcome.target_hidden)

    def _fused(self, hidden: Sequence[torch.Tensor | PathFeatures]) -> tuple[torch.Tensor, ...]:
        """The head's fused features of each entry ([A_i, F] target features, or a `PathFeatures`), from one gather
        and one fuse call for all of them (each row of the result is computed from its own row alone)."""
        lazy = [h for h in hidden if isinstance(h, PathFeatures)]
        computed = iter(gather_features(lazy).split([len(h.nodes) for h in lazy]) if lazy else ())
        raw = [next(computed) if isinstance(h, PathFeatures) else h for h in hidden]
        return self.model.fuse_features(torch.cat(raw).to(self.device)).split([len(h) for h in raw])

    def _catch_up(self) -> None:
        """The pending features of each row's absorbed steps: the target's features of all of them computed and
        fused in one call per row (the values one call per step gives: each row of the features is computed alone)."""
        for b, queue in enumerate(self._absorbed):
            if not queue:
                continue
            for features in self._fused(queue):
                self.pending_features[b] = torch.cat([self.pending_features[b], self.root_feature[b][None],
                                                      features[:-1]])
                self.root_feature[b] = features[-1]
            self._absorbed[b] = []

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        """Keep each row's chain (drafted features are replaced by the target's own); queue the accepted path. The
        rows' features are gathered and fused in one call each (every row's values are computed from its own)."""
        if any(outcome.target_hidden is None for outcome in outcomes):
            raise ValueError("EagleDrafter needs the target's hidden states of the accepted path")
        for b, (outcome, features) in enumerate(zip(outcomes, self._fused([o.target_hidden for o in outcomes]))):
            self.pending_features[b] = features[:-1]
            self.pending_tokens[b] = list(outcome.accepted_tokens[1:])
            self.root_feature[b] = features[-1]
        self._keep([list(range(m)) for m in self._chain])
