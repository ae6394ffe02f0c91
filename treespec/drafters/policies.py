"""Tree policies: how each row's token tree is drafted, for B >= 1 rows in lockstep (one draft forward per level).

Every policy turns a drafter and the rows' root tokens into one `DraftTree` per row (tokens, realised shape, draft
probabilities where verification needs them, and the verification mode that makes it lossless).

Static policies fill a fixed `TreeShape` level by level: `Chain(k)`, `KAry(widths)` (SpecInfer's expansion
vector), `Paths(paths)` (Medusa/EAGLE choices), `Sequoia(accept, budget, max_depth)` (the DP optimum) or
`Static(shape)`. Children of a node are, under greedy decoding, the draft's top-k; under sampling,
`children="without_replacement"` (Sequoia, default), `"with_replacement"` (SpecInfer) or `"deterministic"`
(top-k of q). `Dynamic(budget, depth, topk)` grows a per-context tree (EAGLE-2). `Adaptive(max_depth, threshold,
width)` drafts a chain (each chain node with `width` children, the first continuing it) for as long as the chain's
draft probability stays at or above `threshold` (or, with `stop="token"`, each new token's: assisted generation's
confidence stop), so an expensive draft stops early on text it is unsure of. Its shape depends only on draft-side
quantities, so it is lossless (docs/algorithms.md).
A node holding an EOS token is never expanded; a node whose q has fewer non-zero tokens than the shape asks for
gets fewer children, so the realised tree can be smaller than the shape; a row that needs fewer levels (it is
about to reach max_new_tokens) gets a shallower tree.

Rows: every choice and every random draw of row b (from its own generator, in the same order) is the one a
one-row run makes, so row b's tree is the tree it would get alone. The drafter runs its root pass for every row
whenever any row drafts, so that its per-row state stays in step.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from treespec.decode.engine import Drafter
from treespec.decode.sampling import SamplingConfig, gumbel_top_k, probabilities, sample_with_replacement, top_tokens
from treespec.decode.tree import DraftTree, TreeShape, chain, kary
from treespec.errors import ConfigError
from treespec.plan.optimizer import sequoia_tree

CHILDREN_MODES = ("without_replacement", "with_replacement", "deterministic")
STOP_RULES = ("path", "token")  # Adaptive: the chain's probability, or each new token's
Generators = Sequence[torch.Generator | None]


def pick_children(logits: torch.Tensor, k: int, sampling: SamplingConfig, children: str,
                  generator: torch.Generator | None) -> tuple[list[int], torch.Tensor | None]:
    """Child tokens of one node (rank order) from its draft logits [V], and the processed q they came from (None
    for greedy)."""
    if sampling.greedy:
        return top_tokens(logits, k), None
    q = probabilities(logits, sampling)
    if children == "without_replacement":
        picked = gumbel_top_k(q, k, generator)
    elif children == "with_replacement":
        picked = sample_with_replacement(q, k, generator)
    else:
        return top_tokens(q, min(k, int((q > 0).sum()))), q
    return picked.tolist(), q


def assemble(tokens: list[int], parents: list[int], q_rows: dict[int, torch.Tensor], mode: str,
             drafter_ids: tuple[int, ...] | None = None) -> DraftTree:
    """A `DraftTree` from node tokens, parents and the q rows [V] of the expanded nodes (sampling modes)."""
    probs = None
    if q_rows:
        first = next(iter(q_rows.values()))
        probs = first.new_zeros(len(tokens), first.shape[-1])  # [N, V]
        for node, q in q_rows.items():
            probs[node] = q
    device = next(iter(q_rows.values())).device if q_rows else None
    return DraftTree(torch.tensor(tokens, device=device), TreeShape(tuple(parents)), probs, mode, drafter_ids)


def root_logits(drafter: Drafter | None, roots: Sequence[int], drafting: Sequence[bool]) -> list[torch.Tensor | None]:
    """Each row's draft logits after its root [V] (None for rows that do not draft): one root pass for every row
    when any row drafts (see the module docstring)."""
    if drafter is None or not any(drafting):
        return [None] * len(roots)
    logits = drafter.root_logits(roots)  # [B, V]
    return [logits[b] if drafting[b] else None for b in range(len(roots))]


def level_limits(drafter: Drafter | None, max_levels: Sequence[int]) -> list[int]:
    """Each row's level limit (root included), capped at 1 + `drafter.max_depth` for a drafter that proposes only
    that many levels below the root (Medusa heads); the cap depends on the drafter alone, so trees stay lossless."""
    depth = getattr(drafter, "max_depth", None)
    return [int(m) if depth is None else min(int(m), depth + 1) for m in max_levels]


def _check_children(children: str) -> None:
    if children not in CHILDREN_MODES:
        raise ConfigError(f"children must be one of {CHILDREN_MODES}, got '{children}'")


@dataclass(frozen=True)
class Static:
    """Fill a fixed shape; see the module docstring for how children are chosen."""

    shape: TreeShape
    children: str = "without_replacement"
    name: str = "static"

    def __post_init__(self):
        _check_children(self.children)

    def describe(self) -> dict:
        return {"policy": self.name, "budget": self.shape.size, "depth": self.shape.levels, "children": self.children,
                **{k: v for k, v in self.shape.provenance.items() if k not in ("policy",)}}

    def verify_mode(self, sampling: SamplingConfig) -> str:
        return "greedy" if sampling.greedy else self.children

    def draft(self, drafter: Drafter | None, roots: Sequence[int], sampling: SamplingConfig, generators: Generators,
              eos: Collection[int], max_levels: Sequence[int]) -> list[DraftTree]:
        shape, rows = self.shape, len(roots)
        levels = [min(shape.levels, m) for m in level_limits(drafter, max_levels)]
        tokens = [[int(r)] for r in roots]
        parents: list[list[int]] = [[-1] for _ in roots]
        realised = [{0: 0} for _ in roots]  # shape node -> realised node, per row
        q_rows: list[dict[int, torch.Tensor]] = [{} for _ in roots]
        logits_of: list[dict[int, torch.Tensor]] = [{} for _ in roots]  # shape node -> its draft logits [V]
        for b, logits in enumerate(root_logits(drafter, roots, [n > 1 for n in levels])):
            if logits is not None:
                logits_of[b][0] = logits
        for level in range(max(levels) - 1):
            grow: list[list[int]] = [[] for _ in roots]
            for b in range(rows):
                if level >= levels[b] - 1:
                    continue
                born = []
                for v in shape.level_nodes[level]:
                    if v not in logits_of[b]:
                        continue
                    rv = realised[b][v]
                    picked, q = pick_children(logits_of[b][v], len(shape.children[v]), sampling, self.children,
                                              generators[b])
                    if q is not None:
                        q_rows[b][rv] = q
                    for child, token in zip(shape.children[v], picked):
                        realised[b][child] = len(tokens[b])
                        tokens[b].append(int(token))
                        parents[b].append(rv)
                        born.append(child)
                grow[b] = [c for c in born if shape.children[c] and level + 2 < levels[b]
                           and tokens[b][realised[b][c]] not in eos]
            if any(grow):
                requests = []
                for b in range(rows):
                    nodes = [realised[b][c] for c in grow[b]]
                    requests.append((nodes, [tokens[b][n] for n in nodes], [parents[b][n] for n in nodes])
                                    if nodes else None)
                for b, logits in enumerate(drafter.node_logits(requests)):
                    logits_of[b].update(zip(grow[b], logits))
        mode = self.verify_mode(sampling)
        return [assemble(tokens[b], parents[b], q_rows[b], mode) for b in range(rows)]


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

    def draft(self, drafter: Drafter | None, roots: Sequence[int], sampling: SamplingConfig, generators: Generators,
              eos: Collection[int], max_levels: Sequence[int]) -> list[DraftTree]:
        mode = "greedy" if sampling.greedy else "deterministic"
        rows = len(roots)
        depth = [1 if self.budget == 1 else min(self.depth, m) for m in level_limits(drafter, max_levels)]
        # candidates per row: (score, depth, parent candidate, token, rank); candidate 0 is the root
        cands = [[(0.0, 0, -1, int(r), 0)] for r in roots]
        forwarded = [{0: 0} for _ in roots]  # candidate -> node id given to the drafter
        frontier: list[list[int]] = [[0] if depth[b] > 1 else [] for b in range(rows)]
        frontier_logits = [None if logits is None else logits[None]
                           for logits in root_logits(drafter, roots, [d > 1 for d in depth])]  # [1, V] per row
        for level in range(1, max(depth)):
            requests: list = [None] * rows
            for b in range(rows):
                if not frontier[b]:
                    continue
                born = []
                logp = torch.log_softmax(frontier_logits[b].float(), dim=-1)  # [w, V]
                for row, parent in enumerate(frontier[b]):
                    top = top_tokens(logp[row], self.topk)
                    for rank, (lp, token) in enumerate(zip(logp[row, top].tolist(), top)):
                        born.append(len(cands[b]))
                        cands[b].append((cands[b][parent][0] + lp, level, parent, token, rank))
                if level == depth[b] - 1:
                    frontier[b] = []
                    continue
                best = sorted(born, key=lambda c, b=b: -cands[b][c][0])[: self.topk]
                frontier[b] = [c for c in best if cands[b][c][3] not in eos]
                for c in frontier[b]:
                    forwarded[b][c] = len(forwarded[b])
                if frontier[b]:
                    requests[b] = ([forwarded[b][c] for c in frontier[b]], [cands[b][c][3] for c in frontier[b]],
                                   [forwarded[b][cands[b][c][2]] for c in frontier[b]])
            if any(r is not None for r in requests):
                for b, logits in enumerate(drafter.node_logits(requests)):
                    if requests[b] is not None:
                        frontier_logits[b] = logits
        return [keep_best(cands[b], forwarded[b], self.budget, mode) for b in range(rows)]


def keep_best(cands, forwarded: dict[int, int], budget: int, mode: str) -> DraftTree:
    """Dynamic's final cut: the best budget - 1 candidates, breadth-first, siblings by rank (a kept node's
    ancestors score at least as high, so they are kept)."""
    kept = sorted(range(1, len(cands)), key=lambda c: (-cands[c][0], cands[c][1]))[: budget - 1]
    order = [0] + sorted(kept, key=lambda c: (cands[c][1], _lineage(cands, c)))
    index = {c: i for i, c in enumerate(order)}
    tokens = [cands[c][3] for c in order]
    parents = [-1] + [index[cands[c][2]] for c in order[1:]]
    drafter_ids = tuple(forwarded.get(c, -1 - i) for i, c in enumerate(order))  # -1 - i: never forwarded
    return assemble(tokens, parents, {}, mode, drafter_ids)


def _lineage(cands, c) -> tuple[int, ...]:
    """Rank path of candidate c (sort key that puts siblings in rank order under the same parent order)."""
    ranks = []
    while c > 0:
        ranks.append(cands[c][4])
        c = cands[c][2]
    return tuple(reversed(ranks))


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
        _check_children(self.children)
        if self.stop not in STOP_RULES:
            raise ConfigError(f"stop must be one of {STOP_RULES}, got '{self.stop}'")

    def describe(self) -> dict:
        return {"policy": self.name, "budget": 1 + (self.max_depth - 1) * self.width, "depth": self.max_depth,
                "threshold": self.threshold, "stop": self.stop, "width": self.width, "children": self.children}

    def draft(self, drafter: Drafter | None, roots: Sequence[int], sampling: SamplingConfig, generators: Generators,
              eos: Collection[int], max_levels: Sequence[int]) -> list[DraftTree]:
        mode = "greedy" if sampling.greedy else self.children
        rows = len(roots)
        levels = [min(self.max_depth, m) for m in level_limits(drafter, max_levels)]
        tokens = [[int(r)] for r in roots]
        parents: list[list[int]] = [[-1] for _ in roots]
        q_rows: list[dict[int, torch.Tensor]] = [{} for _ in roots]
        node, confidence = [0] * rows, [1.0] * rows  # each row's chain end and its confidence
        logits = root_logits(drafter, roots, [n > 1 for n in levels])  # [V] per drafting row
        for level in range(1, max(levels)):
            requests: list = [None] * rows
            for b in range(rows):
                if logits[b] is None:
                    continue
                picked, q = pick_children(logits[b], self.width, sampling, self.children, generators[b])
                if q is not None:
                    q_rows[b][node[b]] = q
                first = len(tokens[b])
                tokens[b].extend(int(t) for t in picked)
                parents[b].extend([node[b]] * len(picked))
                best = tokens[b][first]
                p_best = float(q[best] if q is not None else torch.softmax(logits[b].float(), -1)[best])
                confidence[b] = p_best if self.stop == "token" else confidence[b] * p_best
                logits[b] = None
                if level + 1 >= levels[b] or confidence[b] < self.threshold or best in eos:
                    continue
                node[b] = first
                requests[b] = ([first], [best], [parents[b][first]])
            if any(r is not None for r in requests):
                for b, out in enumerate(drafter.node_logits(requests)):
                    if requests[b] is not None:
                        logits[b] = out[0]
        return [assemble(tokens[b], parents[b], q_rows[b], mode) for b in range(rows)]


def as_policy(tree):
    """Accept a policy, a TreeShape, or None (autoregressive)."""
    if tree is None:
        return Static(chain(0), name="autoregressive")
    if isinstance(tree, TreeShape):
        return Static(tree, name=str(tree.provenance.get("policy", "static")))
    if hasattr(tree, "draft") and hasattr(tree, "describe"):
        return tree
    raise ConfigError(
        f"tree must be a TreeShape (e.g. treespec.optimizer.sequoia_tree(...)), a policy from treespec.policies "
        f"(Chain, KAry, Paths, Sequoia, Static, Dynamic, Adaptive, NGram, Lookahead, Hybrid) or None, got {type(tree).__name__}"
    )


def policy_sources(policy) -> tuple[str, ...]:
    """What a policy drafts from: ("model",) for the policies here, ("ngram",), ("lookahead",) or ("model", "ngram") for those of
    treespec.drafters.sources, () for a one-node static tree (no drafting)."""
    shape = getattr(policy, "shape", None)
    if shape is not None and shape.size == 1:
        return ()
    return tuple(getattr(policy, "sources", ("model",)))
