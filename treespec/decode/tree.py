"""Tree shapes: which nodes a step drafts, independent of the tokens they will hold.

A `TreeShape` of N nodes is its parent list: `parents[0] == -1` (the root, the last accepted token),
`parents[i] < i` (topological order), and the children of each node appear in *rank* order (the first
child is the draft's 1st candidate at that node, the second its 2nd, ...). Depth counts edges from the
root; `levels` = max depth + 1 (the root is level 1, as in Sequoia's depth limit).

`DraftTree` is one row's drafted tree as the engine verifies it: the tokens in the shape's nodes, the draft
probabilities where verification needs them, and the verification mode.

Conversions: rank paths (the Medusa/EAGLE "choices" format: one 0-based rank tuple per non-root node,
e.g. [(0,), (1,), (0, 0)]), a networkx DiGraph, and YAML with provenance (how the tree was made).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import networkx as nx
import torch
import yaml

from treespec.errors import ConfigError


@dataclass(frozen=True)
class TreeShape:
    """A rooted, rank-ordered tree in topological order (see module docstring)."""

    parents: tuple[int, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "parents", tuple(int(p) for p in self.parents))
        if not self.parents or self.parents[0] != -1:
            raise ConfigError("a tree needs a root: parents[0] must be -1")
        for i, parent in enumerate(self.parents[1:], start=1):
            if not 0 <= parent < i:
                raise ConfigError(f"parents must be topological (0 <= parents[i] < i); node {i} has parent {parent}")

    @property
    def size(self) -> int:
        """N, the number of nodes including the root (= tokens the target verifies per pass)."""
        return len(self.parents)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        depths = [0] * self.size
        for i in range(1, self.size):
            depths[i] = depths[self.parents[i]] + 1
        return tuple(depths)

    @property
    def levels(self) -> int:
        """Number of levels including the root (Sequoia's depth)."""
        return max(self.depths) + 1

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for i in range(1, self.size):
            kids[self.parents[i]].append(i)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def ranks(self) -> tuple[int, ...]:
        """0-based rank of each node among its siblings (the root has rank 0)."""
        ranks = [0] * self.size
        for kids in self.children:
            for rank, child in enumerate(kids):
                ranks[child] = rank
        return tuple(ranks)

    @cached_property
    def level_nodes(self) -> tuple[tuple[int, ...], ...]:
        """Node indices grouped by depth."""
        groups: list[list[int]] = [[] for _ in range(self.levels)]
        for i, d in enumerate(self.depths):
            groups[d].append(i)
        return tuple(tuple(g) for g in groups)

    def path(self, node: int) -> tuple[int, ...]:
        """0-based rank path from the root to `node` (empty for the root)."""
        ranks = []
        while node > 0:
            ranks.append(self.ranks[node])
            node = self.parents[node]
        return tuple(reversed(ranks))

    def to_paths(self) -> list[tuple[int, ...]]:
        return [self.path(i) for i in range(1, self.size)]

    @classmethod
    def from_paths(cls, paths: Iterable[Sequence[int]], provenance: Mapping[str, Any] | None = None) -> TreeShape:
        """Build from rank paths; nodes come out in breadth-first order, siblings by rank."""
        unique = sorted({tuple(int(r) for r in p) for p in paths}, key=lambda p: (len(p), p))
        index = {(): 0}
        parents = [-1]
        for p in unique:
            if not p:
                continue
            if min(p) < 0:
                raise ConfigError(f"ranks in a path must be >= 0: {list(p)}")
            if p[:-1] not in index:
                raise ConfigError(f"path {list(p)} has no parent path {list(p[:-1])}")
            if p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in index:
                raise ConfigError(f"path {list(p)} skips rank {p[-1] - 1} among its siblings")
            index[p] = len(parents)
            parents.append(index[p[:-1]])
        return cls(tuple(parents), dict(provenance or {}))

    def to_networkx(self) -> nx.DiGraph:
        """DiGraph with edges parent -> child; node attributes depth, rank, path."""
        graph = nx.DiGraph()
        for i in range(self.size):
            graph.add_node(i, depth=self.depths[i], rank=self.ranks[i], path=self.path(i))
        graph.add_edges_from((self.parents[i], i) for i in range(1, self.size))
        return graph

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "levels": self.levels,
            "parents": list(self.parents),
            "paths": [list(p) for p in self.to_paths()],
            "provenance": _plain(dict(self.provenance)),
        }

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TreeShape:
        provenance = dict(data.get("provenance") or {})
        if "parents" in data:
            return cls(tuple(data["parents"]), provenance)
        if "paths" in data:
            return cls.from_paths(data["paths"], provenance)
        raise ConfigError("a tree description needs 'parents' or 'paths'")

    @classmethod
    def from_yaml(cls, source: str | Path) -> TreeShape:
        """Read a tree from a YAML file path or a YAML string."""
        text = Path(source).read_text() if isinstance(source, Path) or str(source).endswith((".yaml", ".yml")) else source
        return cls.from_dict(yaml.safe_load(text))


@dataclass(frozen=True)
class DraftTree:
    """One row's drafted tree: what a tree policy hands the engine."""

    tokens: torch.Tensor  # [N] long; tokens[0] is the root
    shape: TreeShape  # the realised tree (parents, depths, children in rank order)
    draft_probs: torch.Tensor | None  # [N, V] processed q at expanded nodes (sampling modes), else None
    verify_mode: str  # a mode of treespec.decode.verify
    drafter_ids: tuple[int, ...] | None = None  # node ids the drafter saw, when they differ from tree ids
    sources: tuple[str, ...] | None = None  # [N] what proposed each node ("model", "ngram", "model+ngram"; root "")
    matches: tuple[int, ...] | None = None  # [N] prompt lookup's suffix-match length behind each node (0: none)

    def token_path(self, tokens: Sequence[int]) -> list[int]:
        """The nodes of a token path from the root (tokens[0] is the root's), as far as the tree holds it (siblings
        hold distinct tokens)."""
        ids, path = self.tokens.tolist(), [0]
        for token in tokens[1:]:
            node = next((c for c in self.shape.children[path[-1]] if ids[c] == int(token)), None)
            if node is None:
                break
            path.append(node)
        return path


def chain(k: int) -> TreeShape:
    """Root plus a chain of k drafted tokens (k + 1 nodes)."""
    if k < 0:
        raise ConfigError(f"chain length must be >= 0, got {k}")
    return TreeShape(tuple(range(-1, k)), {"policy": "chain", "k": k})


def kary(widths: Sequence[int]) -> TreeShape:
    """SpecInfer-style expansion <k1, ..., km>: every node at depth i-1 gets k_i children."""
    if not widths or any(int(w) < 1 for w in widths):
        raise ConfigError(f"expansion widths must be >= 1, got {list(widths)}")
    paths: list[tuple[int, ...]] = [()]
    frontier: list[tuple[int, ...]] = [()]
    for width in widths:
        frontier = [p + (r,) for p in frontier for r in range(int(width))]
        paths.extend(frontier)
    return TreeShape.from_paths(paths, {"policy": "kary", "widths": [int(w) for w in widths]})


def _plain(value: Any) -> Any:
    """Convert numpy/torch scalars and arrays inside provenance to plain YAML-safe Python."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    return value
