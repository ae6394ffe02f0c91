"""Batched drafters: one draft forward per tree level for all rows of a batch, each row with its own tree.

The batched counterpart of the drafter protocol (treespec.draft), called by `treespec.batch_trees`:
  reset(prompts, prefix_hidden)      start B sequences (prefix_hidden [B, W, F]: the target's features,
                                     treespec.eagle.target_features, of each prompt minus its last token, right padded)
  root_logits(roots) -> [B, V]       logits after each row's root
  node_logits(requests) -> [m_b, V] per row   one tree level: requests[b] = (nodes, tokens, parents), maybe empty
  observe(outcomes)                  each row's verified `StepOutcome`; keep what was accepted
  select(rows)                       keep only these rows (finished rows are dropped)

The draft cache is right padded, like the target's: row b's kept tokens fill slots [0, committed[b]) and
hold the positions a single-prompt drafter gives them. A step appends slots for all rows at once: the
root pass writes each row's chain (tokens accepted but not yet seen, then the root) at slots
[start, start + chain[b]), each level pass one slot per requested node; a row with fewer queries than
the widest row gets padding queries that see only themselves. A query sees its row's committed slots,
its chain up to itself (the whole chain for tree nodes), its tree ancestors and itself. `observe` moves
the slots a row keeps behind its committed ones (`cache.commit_rows`); the rest become padding.

`BatchModelDrafter` runs a causal-LM draft (treespec.draft.ModelDrafter's layout, positions = slots);
`BatchEagleDrafter` an EAGLE head (treespec.eagle.EagleDrafter's, positions = slots + 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from treespec.cache import cache_length, commit_rows, new_cache, select_rows
from treespec.draft import StepOutcome
from treespec.eagle import EagleDraftModel, check_feature_layers
from treespec.mask import additive

Request = tuple[Sequence[int], Sequence[int], Sequence[int]]  # (nodes, tokens, parents) of one row


class _BatchTreeDrafter:
    """The per-row slot bookkeeping shared by both batched drafters (see module docstring)."""

    position_offset = 0  # position of the token in row slot s is s + position_offset

    def _begin(self, rows: int) -> None:
        self.committed = [0] * rows

    def _run(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
             features: torch.Tensor | None) -> torch.Tensor:
        """tokens, positions [B, M]; additive mask [B, 1, M, L + M]; features [B, M, H] or None -> [B, M, *]."""
        raise NotImplementedError

    def _chain_pass(self, chains: Sequence[Sequence[int]], features: torch.Tensor | None) -> torch.Tensor:
        """Forward each row's chain (pending tokens, then the root); returns the outputs at the roots [B, *]."""
        rows, length = len(chains), cache_length(self.cache)
        width = max(len(c) for c in chains)
        visible = torch.zeros(rows, width, length + width, dtype=torch.bool)
        tokens = torch.zeros(rows, width, dtype=torch.long)
        positions = torch.zeros(rows, width, dtype=torch.long)
        self._start, self._chain = length, [len(c) for c in chains]
        self._root_position, self._slot, self._parent, self._depth = [], [], [], []
        for b, chain in enumerate(chains):
            m, first = len(chain), self.committed[b] + self.position_offset
            visible[b, :m, : self.committed[b]] = True
            visible[b, :, length:] = torch.ones(width, width, dtype=torch.bool).tril()
            visible[b, m:, length:] = torch.eye(width, dtype=torch.bool)[m:]
            tokens[b, :m] = torch.as_tensor(list(chain), dtype=torch.long)
            positions[b] = first + torch.arange(width).clamp_max(m - 1)
            self._root_position.append(first + m - 1)
            self._slot.append({0: length + m - 1})
            self._parent.append({0: -1})
            self._depth.append({0: 0})
        out = self._run(tokens.to(self.device), positions.to(self.device), additive(visible.to(self.device), self.dtype),
                        features)
        return out[torch.arange(rows, device=out.device), torch.as_tensor(self._chain, device=out.device) - 1]

    def _node_pass(self, requests: Sequence[Request | None], features: torch.Tensor | None) -> torch.Tensor:
        """Forward one tree level of every row; returns the padded outputs [B, M, *]."""
        rows, length = len(requests), cache_length(self.cache)
        sizes = [len(r[0]) if r else 0 for r in requests]
        width = max(sizes)
        visible = torch.zeros(rows, width, length + width, dtype=torch.bool)
        visible[:, :, length:] = torch.eye(width, dtype=torch.bool)
        tokens = torch.zeros(rows, width, dtype=torch.long)
        positions = torch.zeros(rows, width, dtype=torch.long)
        for b, request in enumerate(requests):
            if not sizes[b]:
                continue
            nodes, toks, parents = request
            slot, parent_of, depth = self._slot[b], self._parent[b], self._depth[b]
            visible[b, : sizes[b], : self.committed[b]] = True
            visible[b, : sizes[b], self._start: self._start + self._chain[b]] = True  # pending tokens and the root
            for j, (node, parent) in enumerate(zip(nodes, parents)):
                ancestor = parent
                while ancestor > 0:
                    visible[b, j, slot[ancestor]] = True
                    ancestor = parent_of[ancestor]
                parent_of[node], depth[node] = parent, depth[parent] + 1
                positions[b, j] = self._root_position[b] + depth[node]
            tokens[b, : sizes[b]] = torch.as_tensor(list(toks), dtype=torch.long)
        out = self._run(tokens.to(self.device), positions.to(self.device), additive(visible.to(self.device), self.dtype),
                        features)
        for b, request in enumerate(requests):
            for j, node in enumerate(request[0] if request else ()):
                self._slot[b][node] = length + j
        return out

    def _keep(self, kept: Sequence[Sequence[int]]) -> None:
        """Row b keeps its committed slots and the step's slots start + kept[b][j]."""
        self.committed = commit_rows(self.cache, self.committed, self._start, kept)

    def select(self, rows: Sequence[int]) -> None:
        """Keep only the batch rows `rows` (in that order)."""
        select_rows(self.cache, rows)
        for name in self._row_state:
            values = getattr(self, name)
            setattr(self, name, [values[r] for r in rows])


class BatchModelDrafter(_BatchTreeDrafter):
    """A causal-LM draft with its own right-padded KV cache (treespec.draft.ModelDrafter, batched)."""

    wants_target_hidden = False
    _row_state = ("committed", "pending", "_chain", "_root_position", "_slot", "_parent", "_depth")

    def __init__(self, model: PreTrainedModel, max_length: int):
        self.model, self.max_length = model, max_length
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype

    def reset(self, prompts: Sequence[Sequence[int]], prefix_hidden: torch.Tensor | None = None) -> None:
        self.cache = new_cache(self.model, self.max_length)
        self._begin(len(prompts))
        self.pending = [[int(t) for t in p[:-1]] for p in prompts]

    def _run(self, tokens, positions, mask, features):
        return self.model(input_ids=tokens, position_ids=positions, attention_mask=mask, cache=self.cache,
                          use_cache=True).logits

    def root_logits(self, roots: Sequence[int]) -> torch.Tensor:
        return self._chain_pass([pending + [int(root)] for pending, root in zip(self.pending, roots)], None)  # [B, V]

    def node_logits(self, requests: Sequence[Request | None]) -> list[torch.Tensor]:
        logits = self._node_pass(requests, None)  # [B, M, V]
        return [logits[b, : len(r[0]) if r else 0] for b, r in enumerate(requests)]

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        kept = []
        for b, outcome in enumerate(outcomes):
            path = list(zip(outcome.accepted_nodes[1:], outcome.accepted_tokens[1:]))
            seen = [self._slot[b][node] - self._start for node, _ in path if node in self._slot[b]]
            kept.append(list(range(self._chain[b])) + seen)
            self.pending[b] = [token for node, token in path if node not in self._slot[b]]
        self._keep(kept)


class BatchEagleDrafter(_BatchTreeDrafter):
    """An `EagleDraftModel` over a right-padded cache (treespec.eagle.EagleDrafter, batched)."""

    wants_target_hidden = True
    position_offset = 1
    _row_state = ("committed", "pending_tokens", "pending_features", "root_feature", "_chain", "_root_position",
                  "_slot", "_parent", "_depth", "_hidden")

    def __init__(self, draft: EagleDraftModel, target: PreTrainedModel, max_length: int):
        check_feature_layers(draft.config, target)
        self.target_layers = tuple(draft.config.feature_layers)  # what the engine passes as target features
        self.model, self.embed, self.max_length = draft, target.get_input_embeddings(), max_length
        self.device = next(draft.parameters()).device
        self.dtype = next(draft.parameters()).dtype

    def reset(self, prompts: Sequence[Sequence[int]], prefix_hidden: torch.Tensor | None = None) -> None:
        """prefix_hidden [B, W, F]: row b's first len(prompts[b]) - 1 entries are the target's features of
        prompts[b][:-1] (treespec.eagle.target_features); None or missing rows start from zero features."""
        hidden = self.model.config.hidden_size
        self.cache = new_cache(self.model, self.max_length)
        self._begin(len(prompts))
        self.pending_tokens, self.pending_features, self.root_feature = [], [], []
        for b, prompt in enumerate(prompts):
            prefix = len(prompt) - 1
            if prefix_hidden is not None and prefix > 0:
                features = self.model.fuse_features(prefix_hidden[b, :prefix].to(self.device))
            else:
                features = torch.zeros(prefix, hidden, device=self.device)
            self.pending_tokens.append([int(t) for t in prompt[1:-1]])
            self.pending_features.append(features[:-1])  # f_0 .. f_{T-3}, paired with x_1 .. x_{T-2}
            self.root_feature.append(features[-1] if prefix else torch.zeros(hidden, device=self.device))
        self._hidden: list[dict[int, torch.Tensor]] = [{} for _ in prompts]

    def _run(self, tokens, positions, mask, features):
        return self.model(features.to(self.dtype), self.embed(tokens).to(self.dtype), positions, mask, self.cache)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.expand_logits(self.model.reduced_logits(hidden))

    def root_logits(self, roots: Sequence[int]) -> torch.Tensor:
        chains = [pending + [int(root)] for pending, root in zip(self.pending_tokens, roots)]
        width = max(len(c) for c in chains)
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

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        """Keep each row's chain (drafted features are replaced by the target's own); queue the accepted path."""
        for b, outcome in enumerate(outcomes):
            if outcome.target_hidden is None:
                raise ValueError("BatchEagleDrafter needs the target's hidden states of the accepted path")
            features = self.model.fuse_features(outcome.target_hidden.to(self.device))
            self.pending_features[b] = features[:-1]
            self.pending_tokens[b] = list(outcome.accepted_tokens[1:])
            self.root_feature[b] = features[-1]
        self._keep([list(range(m)) for m in self._chain])


def make_batch_drafter(draft: PreTrainedModel, target: PreTrainedModel, max_length: int):
    """The batched drafter for a draft model: an EAGLE head reads the target's features, anything else is a causal LM."""
    if isinstance(draft, EagleDraftModel):
        return BatchEagleDrafter(draft, target, max_length)
    return BatchModelDrafter(draft, max_length)
