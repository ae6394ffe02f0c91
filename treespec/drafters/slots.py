"""The cache-slot bookkeeping every model-backed drafter shares, written once for B >= 1 rows.

A drafter's KV cache is right padded, like the target's: row b's kept tokens fill slots [0, committed[b]) at the
positions a one-row drafter gives them. A step appends slots for all rows at once:

  root pass   each row's chain (tokens accepted but not yet seen by the drafter, then the root) at slots
              [start, start + chain[b]); outputs at the roots
  level pass  one slot per requested node of one tree level; a row with fewer nodes than the widest row gets
              padding queries that see only themselves
  keep        after verification, row b keeps its committed slots plus the step's slots start + kept[b][j], moved
              behind them (treespec.decode.cache.commit); the rest become padding

A query sees its row's committed slots, its chain up to itself (the whole chain for tree nodes), its tree
ancestors and itself. The position of the token in a row's slot s is s + `position_offset`. Index spaces: the
policy's node ids (0 = the root) -> cache slots (`_slot[b]`), converted here only.

A subclass supplies `_run(tokens, positions, mask, features)`: one forward of its model over [B, M] new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from treespec.decode.cache import cache_length, commit, select_rows
from treespec.decode.engine import Request
from treespec.decode.mask import additive


class RowSlots:
    """Per-row slot bookkeeping for a drafter with its own KV cache (see the module docstring)."""

    position_offset = 0  # position of the token in row slot s is s + position_offset
    _row_state: tuple[str, ...] = ()  # per-row attributes a subclass adds (lists indexed by row)

    device: torch.device
    dtype: torch.dtype
    cache: object

    def _begin(self, rows: int) -> None:
        self.committed = [0] * rows  # [B]: slots holding tokens accepted and kept
        self._start = 0
        self._chain, self._root_position = [0] * rows, [0] * rows  # set by every root pass
        self._slot, self._parent, self._depth = [{} for _ in range(rows)], [{} for _ in range(rows)], [{} for _ in range(rows)]

    def _run(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
             features: torch.Tensor | None) -> torch.Tensor:
        """tokens, positions [B, M]; additive mask [B, 1, M, L + M]; features [B, M, H] or None -> [B, M, *]."""
        raise NotImplementedError

    def _chain_pass(self, chains: Sequence[Sequence[int]], features: torch.Tensor | None) -> torch.Tensor:
        """Forward each row's chain (pending tokens, then the root); returns the outputs at the roots [B, *]."""
        rows, length = len(chains), cache_length(self.cache)
        width = max(len(c) for c in chains)
        visible = torch.zeros(rows, width, length + width, dtype=torch.bool)
        visible[:, :, length:] = torch.ones(width, width, dtype=torch.bool).tril()
        tokens, positions = [], []
        self._start, self._chain = length, [len(c) for c in chains]
        self._root_position, self._slot, self._parent, self._depth = [], [], [], []
        for b, chain in enumerate(chains):
            m, first = len(chain), self.committed[b] + self.position_offset
            visible[b, :m, : self.committed[b]] = True
            if m < width:  # padding queries see only themselves
                visible[b, m:, length:] = torch.eye(width, dtype=torch.bool)[m:]
            tokens.append([int(t) for t in chain] + [0] * (width - m))
            positions.append([first + min(j, m - 1) for j in range(width)])
            self._root_position.append(first + m - 1)
            self._slot.append({0: length + m - 1})
            self._parent.append({0: -1})
            self._depth.append({0: 0})
        out = self._run(torch.tensor(tokens, device=self.device), torch.tensor(positions, device=self.device),
                        additive(visible.to(self.device), self.dtype), features)  # [B, W, *]
        if rows == 1:
            return out[:, -1]
        return out[torch.arange(rows, device=out.device), torch.as_tensor(self._chain, device=out.device) - 1]

    def _node_pass(self, requests: Sequence[Request | None], features: torch.Tensor | None) -> torch.Tensor:
        """Forward one tree level of every row; returns the padded outputs [B, M, *]."""
        rows, length = len(requests), cache_length(self.cache)
        sizes = [len(r[0]) if r else 0 for r in requests]
        width = max(sizes)
        visible = torch.zeros(rows, width, length + width, dtype=torch.bool)
        visible[:, :, length:] = torch.eye(width, dtype=torch.bool)
        tokens, positions = [], []
        for b, request in enumerate(requests):
            if not sizes[b]:
                tokens.append([0] * width)
                positions.append([0] * width)
                continue
            nodes, toks, parents = request
            slot, parent_of, depth = self._slot[b], self._parent[b], self._depth[b]
            visible[b, : sizes[b], : self.committed[b]] = True
            visible[b, : sizes[b], self._start: self._start + self._chain[b]] = True  # pending tokens and the root
            row_positions = []
            for j, (node, parent) in enumerate(zip(nodes, parents)):
                seen, ancestor = [], parent
                while ancestor > 0:
                    seen.append(slot[ancestor])
                    ancestor = parent_of[ancestor]
                if seen:
                    visible[b, j, seen] = True
                parent_of[node], depth[node] = parent, depth[parent] + 1
                row_positions.append(self._root_position[b] + depth[node])
            tokens.append([int(t) for t in toks] + [0] * (width - sizes[b]))
            positions.append(row_positions + [0] * (width - sizes[b]))
        out = self._run(torch.tensor(tokens, device=self.device), torch.tensor(positions, device=self.device),
                        additive(visible.to(self.device), self.dtype), features)
        for b, request in enumerate(requests):
            for j, node in enumerate(request[0] if request else ()):
                self._slot[b][node] = length + j
        return out

    def _keep(self, kept: Sequence[Sequence[int]]) -> None:
        """Row b keeps its committed slots and the step's slots start + kept[b][j]."""
        self.committed = commit(self.cache, self.committed, self._start, kept)

    def select(self, rows: Sequence[int]) -> None:
        """Keep only the batch rows `rows` (in that order)."""
        select_rows(self.cache, rows)
        for name in ("committed", "_chain", "_root_position", "_slot", "_parent", "_depth", *self._row_state):
            values = getattr(self, name)
            setattr(self, name, [values[r] for r in rows])
