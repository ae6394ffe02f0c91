"""Tree policies: how a step's token tree is drafted.

Every policy turns a drafter and the root token into a `DraftTree` (tokens, realised shape, draft
probabilities where verification needs them, and the verification mode that makes it lossless).

Static policies fill a fixed `TreeShape` level by level: `Chain(k)`, `KAry(widths)` (SpecInfer's
expansion vector), `Paths(paths)` (Medusa/EAGLE choices), `Sequoia(accept, budget, max_depth)` (the DP
optimum) or `Static(shape)`. Children of a node are, under greedy decoding, the draft's top-k; under
sampling, `children="without_replacement"` (Sequoia, default), `"with_replacement"` (SpecInfer) or
`"deterministic"` (top-k of q). `Dynamic(budget, depth, topk)` grows a per-context tree (EAGLE-2).
`Adaptive(max_depth, threshold, width)` drafts a chain (each chain node with `width` children, the first
continuing it) for as long as the chain's draft probability stays at or above `threshold` (or, with
`stop="token"`, each new token's: assisted generation's confidence stop), so an expensive draft stops early
on text it is unsure of. Its shape depends only on draft-side quantities, so it is lossless (ALGORITHMS.md
section 8).
A node holding an EOS token is never expanded; a node whose q has fewer non-zero tokens than the
shape asks for gets fewer children, so the realised tree can be smaller than the shape.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from treespec.draft import Drafter
from treespec.errors import ConfigError
from treespec.optimizer import sequoia_tree
from treespec.sampling import SamplingConfig, gumbel_top_k, probabilities, sample_with_replacement
from treespec.tree import TreeShape, chain, kary

CHILDREN_MODES = ("without_replacement", "with_replacement", "deterministic")


@dataclass(frozen=True)
class DraftTree:
    tokens: torch.Tensor  # [N] long; tokens[0] is the root
    shape: TreeShape  # the realised tree (parents, depths, children in rank order)
    draft_probs: torch.Tensor | None  # [N, V] processed q at expanded nodes (sampling modes), else None
    verify_mode: str
    drafter_ids: tuple[int, ...] | None = None  # node ids the drafter saw, when they differ from tree ids


class TreePolicy(Protocol):
    name: str

    def draft(self, drafter: Drafter, root: int, sampling: SamplingConfig, generator: torch.Generator | None,
              eos: Collection[int], max_levels: int) -> DraftTree:
        """Draft a tree of at most `max_levels` levels (the engine never needs more than it can emit)."""

    def describe(self) -> dict: ...


def _pick_children(logits: torch.Tensor, k: int, sampling: SamplingConfig, children: str,
                   generator: torch.Generator | None) -> tuple[list[int], torch.Tensor | None]:
    """Child tokens of one node (rank order) and the processed q they came from (None for greedy)."""
    if sampling.greedy:
        return logits.topk(min(k, logits.shape[-1])).indices.tolist(), None
    q = probabilities(logits, sampling)
    if children == "without_replacement":
        picked = gumbel_top_k(q, k, generator)
    elif children == "with_replacement":
        picked = sample_with_replacement(q, k, generator)
    else:
        picked = q.topk(min(k, int((q > 0).sum()))).indices
    return picked.tolist(), q


@dataclass(frozen=True)
class Static:
    """Fill a fixed shape; see module docstring for how children are chosen."""

    shape: TreeShape
    children: str = "without_replacement"
    name: str = "static"

    def __post_init__(self):
        if self.children not in CHILDREN_MODES:
            raise ConfigError(f"children must be one of {CHILDREN_MODES}, got '{self.children}'")

    def describe(self) -> dict:
        return {"policy": self.name, "budget": self.shape.size, "depth": self.shape.levels, "children": self.children,
                **{k: v for k, v in self.shape.provenance.items() if k not in ("policy",)}}

    def verify_mode(self, sampling: SamplingConfig) -> str:
        return "greedy" if sampling.greedy else self.children

    def draft(self, drafter: Drafter, root: int, sampling: SamplingConfig, generator: torch.Generator | None,
              eos: Collection[int], max_levels: int) -> DraftTree:
        shape = self.shape
        levels = min(shape.levels, max_levels)
        tokens, parents = [int(root)], [-1]
        realised = {0: 0}  # shape node -> realised node
        q_rows: dict[int, torch.Tensor] = {}
        logits_of = {0: drafter.root_logits(root)} if levels > 1 else {}
        for level in range(levels - 1):
            born = []
            for v in shape.level_nodes[level]:
                if v not in logits_of:
                    continue
                rv = realised[v]
                picked, q = _pick_children(logits_of[v], len(shape.children[v]), sampling, self.children, generator)
                if q is not None:
                    q_rows[rv] = q
                for child, token in zip(shape.children[v], picked):
                    realised[child] = len(tokens)
                    tokens.append(int(token))
                    parents.append(rv)
                    born.append(child)
            grow = [c for c in born if shape.children[c] and level + 2 < levels and tokens[realised[c]] not in eos]
            if grow:
                nodes = [realised[c] for c in grow]
                logits = drafter.node_logits(nodes, [tokens[n] for n in nodes], [parents[n] for n in nodes])
                logits_of.update(zip(grow, logits))
        return _assemble(tokens, parents, q_rows, self.verify_mode(sampling))


def _assemble(tokens: list[int], parents: list[int], q_rows: dict[int, torch.Tensor], mode: str,
              drafter_ids: tuple[int, ...] | None = None) -> DraftTree:
    probs = None
    if q_rows:
        first = next(iter(q_rows.values()))
        probs = first.new_zeros(len(tokens), first.shape[-1])
        for node, q in q_rows.items():
            probs[node] = q
    device = next(iter(q_rows.values())).device if q_rows else None
    return DraftTree(torch.tensor(tokens, device=device), TreeShape(tuple(parents)), probs, mode, drafter_ids)


def Chain(k: int, children: str = "without_replacement") -> Static:
    """Root plus k drafted tokens in a line."""
    return Static(chain(k), children, "chain")


def KAry(widths: Sequence[int], children: str = "without_replacement") -> Static:
    """SpecInfer's <k1, ..., km>: every node at depth i-1 gets k_i children."""
    return Static(kary(widths), children, "kary")


def Paths(paths: Sequence[Sequence[int]], children: str = "without_replacement") -> Static:
    """An explicit tree given as 0-based rank paths (Medusa/EAGLE choices)."""
    return Static(TreeShape.from_paths(paths, {"policy": "paths"}), children, "paths")


def Sequoia(accept: Sequence[float] | np.ndarray, budget: int, max_depth: int | None = None,
            children: str = "without_replacement") -> Static:
    """The static tree maximising expected accepted tokens for a measured acceptance vector."""
    return Static(sequoia_tree(accept, budget, max_depth), children, "sequoia")


@dataclass(frozen=True)
class Dynamic:
    """EAGLE-2 style per-context tree: expand the `topk` best-scoring frontier nodes by their draft top-k,
    score = product of draft probabilities (temperature 1) along the path, keep the best budget - 1 nodes.
    Verified with the deterministic rule (greedy under temperature 0)."""

    budget: int
    depth: int
    topk: int = 4
    name: str = field(default="dynamic")

    def __post_init__(self):
        if self.budget < 1:
            raise ConfigError(f"budget must be >= 1, got {self.budget}")
        if self.depth < 1:
            raise ConfigError(f"depth (levels incl. the root) must be >= 1, got {self.depth}")
        if self.topk < 1:
            raise ConfigError(f"topk must be >= 1, got {self.topk}")

    def describe(self) -> dict:
        return {"policy": self.name, "budget": self.budget, "depth": self.depth, "topk": self.topk}

    def draft(self, drafter: Drafter, root: int, sampling: SamplingConfig, generator: torch.Generator | None,
              eos: Collection[int], max_levels: int) -> DraftTree:
        mode = "greedy" if sampling.greedy else "deterministic"
        depth = min(self.depth, max_levels)
        if self.budget == 1 or depth == 1:
            return _assemble([int(root)], [-1], {}, mode)
        # candidates: (score, depth, parent candidate, token, rank); candidate 0 is the root
        cands: list[tuple[float, int, int, int, int]] = [(0.0, 0, -1, int(root), 0)]
        frontier, frontier_logits = [0], drafter.root_logits(root)[None]
        forwarded: dict[int, int] = {0: 0}  # candidate -> node id given to the drafter
        for level in range(1, depth):
            born = []
            logp = torch.log_softmax(frontier_logits.float(), dim=-1)
            top = logp.topk(min(self.topk, logp.shape[-1]), dim=-1)
            for row, parent in enumerate(frontier):
                for rank, (lp, token) in enumerate(zip(top.values[row].tolist(), top.indices[row].tolist())):
                    born.append(len(cands))
                    cands.append((cands[parent][0] + lp, level, parent, token, rank))
            if level == depth - 1:
                break
            best = sorted(born, key=lambda c: -cands[c][0])[: self.topk]
            frontier = [c for c in best if cands[c][3] not in eos]
            if not frontier:
                break
            for c in frontier:
                forwarded[c] = len(forwarded)
            frontier_logits = drafter.node_logits([forwarded[c] for c in frontier], [cands[c][3] for c in frontier],
                                                  [forwarded[cands[c][2]] for c in frontier])
        return keep_best(cands, forwarded, self.budget, mode)


def keep_best(cands, forwarded: dict[int, int], budget: int, mode: str) -> DraftTree:
    """Dynamic's final cut: the best budget - 1 candidates, breadth-first, siblings by rank (a kept node's
    ancestors score at least as high, so they are kept)."""
    kept = sorted(range(1, len(cands)), key=lambda c: (-cands[c][0], cands[c][1]))[: budget - 1]
    order = [0] + sorted(kept, key=lambda c: (cands[c][1], _lineage(cands, c)))
    index = {c: i for i, c in enumerate(order)}
    tokens = [cands[c][3] for c in order]
    parents = [-1] + [index[cands[c][2]] for c in order[1:]]
    drafter_ids = tuple(forwarded.get(c, -1 - i) for i, c in enumerate(order))  # -1 - i: never forwarded
    return _assemble(tokens, parents, {}, mode, drafter_ids)


STOP_RULES = ("path", "token")  # Adaptive: the chain's probability, or each new token's


@dataclass(frozen=True)
class Adaptive:
    """A confidence-stopped chain, optionally with side leaves: the root and each chain node get `width`
    children (drawn by the `children` rule under sampling, the top-`width` under greedy); the first child
    continues the chain while the product of the draft probabilities along the chain is >= `threshold`
    (`stop="path"`), or while each new chain token's probability is (`stop="token"`, the rule of transformers'
    `assistant_confidence_threshold`) (q after sampling processing; the temperature-1 softmax under greedy).
    At most `max_depth` levels including the root; one draft forward per level. Verified like a static tree of
    the same rule."""

    max_depth: int
    threshold: float
    width: int = 1
    children: str = "without_replacement"
    stop: str = "path"
    name: str = field(default="adaptive")

    def __post_init__(self):
        if self.max_depth < 1:
            raise ConfigError(f"max_depth (levels incl. the root) must be >= 1, got {self.max_depth}")
        if not 0 <= self.threshold <= 1:
            raise ConfigError(f"threshold must be in [0, 1], got {self.threshold}")
        if self.width < 1:
            raise ConfigError(f"width must be >= 1, got {self.width}")
        if self.children not in CHILDREN_MODES:
            raise ConfigError(f"children must be one of {CHILDREN_MODES}, got '{self.children}'")
        if self.stop not in STOP_RULES:
            raise ConfigError(f"stop must be one of {STOP_RULES}, got '{self.stop}'")

    def describe(self) -> dict:
        return {"policy": self.name, "budget": 1 + (self.max_depth - 1) * self.width, "depth": self.max_depth,
                "threshold": self.threshold, "stop": self.stop, "width": self.width, "children": self.children}

    def draft(self, drafter: Drafter, root: int, sampling: SamplingConfig, generator: torch.Generator | None,
              eos: Collection[int], max_levels: int) -> DraftTree:
        mode = "greedy" if sampling.greedy else self.children
        levels = min(self.max_depth, max_levels)
        tokens, parents, q_rows = [int(root)], [-1], {}
        if levels <= 1:
            return _assemble(tokens, parents, q_rows, mode)
        node, logits, confidence = 0, drafter.root_logits(root), 1.0
        for level in range(1, levels):
            picked, q = _pick_children(logits, self.width, sampling, self.children, generator)
            if q is not None:
                q_rows[node] = q
            first = len(tokens)
            tokens.extend(int(t) for t in picked)
            parents.extend([node] * len(picked))
            best = tokens[first]
            p_best = float(q[best] if q is not None else torch.softmax(logits.float(), -1)[best])
            confidence = p_best if self.stop == "token" else confidence * p_best
            if level + 1 >= levels or confidence < self.threshold or best in eos:
                break
            node = first
            logits = drafter.node_logits([node], [best], [parents[node]])[0]
        return _assemble(tokens, parents, q_rows, mode)


def _lineage(cands, c) -> tuple[int, ...]:
    """Rank path of candidate c (sort key that puts siblings in rank order under the same parent order)."""
    ranks = []
    while c > 0:
        ranks.append(cands[c][4])
        c = cands[c][2]
    return tuple(reversed(ranks))


def as_policy(tree) -> TreePolicy:
    """Accept a policy, a TreeShape, or None (autoregressive)."""
    if tree is None:
        return Static(chain(0), name="autoregressive")
    if isinstance(tree, TreeShape):
        return Static(tree, name=str(tree.provenance.get("policy", "static")))
    if hasattr(tree, "draft") and hasattr(tree, "describe"):
        return tree
    raise ConfigError(
        f"tree must be a TreeShape (e.g. treespec.optimizer.sequoia_tree(...)), a policy from treespec.policies "
        f"(Chain, KAry, Paths, Sequoia, Static, Dynamic, Adaptive) or None, got {type(tree).__name__}"
    )
