"""What each source's proposals are worth, measured while decoding, and the candidate trie that pays for its rows.

`SourceStats` counts, from every verified step of one row, P(node accepted | its parent was) by source, depth, sibling
rank and, for prompt lookup, the length of the suffix match that proposed the node (a node proposed after a 4-token
match is accepted far more often than one after a 1-token match). `node_probabilities` turns those rates into f(v),
the probability that node v is on the accepted path. `paying_candidates` cuts a trie of candidates to the nodes that
pay for their target rows: the n nodes of highest f (an ancestor's f is never below its child's, so they form a
tree) for the n that maximises the expected tokens per unit of step time, (1 + sum f) / cost(n). The cut depends only
on earlier steps' outcomes and the proposals, never on this step's target output, so verification stays lossless.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from treespec.decode.tree import DraftTree, TreeShape

SOURCES = ("model", "ngram", "lookahead", "jacobi")  # lookahead: the Jacobi pool's n-grams; jacobi: its window
MAX_RANK = 4  # ranks from this one on share the statistics of the last
MATCH_CLASSES = 5  # suffix-match lengths 0 (not a lookup: model, jacobi), 1, 2, 3 and 4 or more
MATCHED_SOURCES = frozenset({"ngram", "lookahead"})  # the sources whose nodes come from a suffix match
PRIOR = 2.0  # the weight of a rate's prior, in trials
PRIOR_STEPS = 4  # the weight of the model's expected accepted nodes a step (`model_length`'s prior), in steps: with
#   the weight of one step, one draft that accepted nothing made the Qwen2.5-Coder pair's planned tree look unpaying
#   for the next 16 steps (3 HumanEval prompts: 18.9 tokens/s; with 4, 24.7; [Intel(R) Xeon(R) Processor @
#   2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07)


class SourceStats:
    """P(a node is accepted | its parent was) by source, depth, sibling rank and suffix-match length, counted from
    verified steps (`rate` gives its prior); and the mean number of model nodes accepted per step where the model
    drafted, over all such steps and apart for each verification rule (`model_length`)."""

    def __init__(self, depth: int = 16):
        shape = (depth, MAX_RANK, MATCH_CLASSES)
        self.proposed = {s: np.zeros(shape) for s in SOURCES}
        self.accepted = {s: np.zeros(shape) for s in SOURCES}
        self.model_steps, self.model_accepted = 0, 0
        self.model_idle = 0  # steps since the model last drafted
        self.probe_misses = 0  # probes in a row after which the model still did not pay (treespec.drafters.sources)
        self.probing = False  # the model's last draft was a probe whose worth the next decision judges
        self.own_steps, self.own_accepted = 0, 0  # of those, the steps whose tree its own sampling rule verified
        self.own_idle = 0  # steps since the last of them
        self._rates: dict = {}  # (source, rank, match) -> rate by depth, (source, match) -> pooled depth-1 rate;
        #   kept until `count`

    def _cell(self, source: str, depth: int, rank: int, match: int = 0) -> tuple[int, int, int]:
        """The counters' index of a node: deeper depths share the last row, higher ranks and longer matches the
        last column; the match length counts for lookup's sources only."""
        match = min(match, MATCH_CLASSES - 1) if source in MATCHED_SOURCES else 0
        return min(depth, len(self.proposed[source])) - 1, min(rank, MAX_RANK - 1), match

    def rate(self, source: str, depth: int, rank: int, match: int = 0) -> float:
        """The posterior mean of a cell's rate. Its prior has the weight of `PRIOR` trials: at depth 1 the source's
        depth-1 rate at that match length pooled over the sibling ranks (itself around 1/2 before any trial), so
        that a rank seldom proposed is expected to do as the source's nodes after such a match do (with a prior of
        1/2 per cell, prompt lookup's trie at t=0.7 was expected to add 0.52 tokens a step and added 0.21 on the
        default pair, AMD EPYC, 2 cores, AVX2 only, 2026-12-07; pooled over the match lengths too, a long match was
        never tried again once short ones had failed); deeper, around the cell's rate one level up, so a depth that
        was never drafted is expected to do as the deepest one that was (and gets drafted, and measured, when that
        pays)."""
        d, r, m = self._cell(source, depth, rank, match)
        key = (source, r, m)
        if key not in self._rates:
            if (source, m) not in self._rates:  # the depth-1 rate pooled over ranks
                trials, accepted = self.proposed[source][0, :, m].sum(), self.accepted[source][0, :, m].sum()
                self._rates[source, m] = (accepted + PRIOR * 0.5) / (trials + PRIOR)
            rates, value = [], self._rates[source, m]
            for level in range(len(self.proposed[source])):
                value = (self.accepted[source][level, r, m] + PRIOR * value) / (self.proposed[source][level, r, m] + PRIOR)
                rates.append(value)
            self._rates[key] = rates
        return self._rates[key][d]

    def model_length(self, rule: str = "any", prior: float = 1.0) -> float:
        """The model's mean accepted nodes per step, `prior` (what is expected before it drafted) counting as
        PRIOR_STEPS steps: over every step it drafted ("any"), those whose tree the deterministic rule verified
        ("deterministic": greedy, merged trees) or those its own sampling rule verified ("own": its q,
        treespec.drafters.sources.Hybrid.model_alone)."""
        steps, accepted = {"any": (self.model_steps, self.model_accepted), "own": (self.own_steps, self.own_accepted),
                           "deterministic": (self.model_steps - self.own_steps,
                                             self.model_accepted - self.own_accepted)}[rule]
        return (accepted + PRIOR_STEPS * prior) / (steps + PRIOR_STEPS)

    def count(self, tree: DraftTree, accepted: Sequence[int]) -> None:
        """One verified tree (`accepted`: its accepted nodes from the root): every node whose parent was accepted was
        a trial of each source that proposed it; the model drafted this step when any node is its."""
        on_path = set(accepted)
        shape, matches = tree.shape, node_matches(tree)
        self._rates.clear()
        for node in range(1, shape.size):
            if shape.parents[node] not in on_path:
                continue
            for source in tree.sources[node].split("+"):
                cell = self._cell(source, shape.depths[node], shape.ranks[node], matches[node])
                self.proposed[source][cell] += 1
                if node in on_path:
                    self.accepted[source][cell] += 1
        own = tree.verify_mode not in ("greedy", "deterministic")  # verified on the model's q: its own sampling rule
        if any("model" in s.split("+") for s in tree.sources[1:]):
            model_accepted = sum("model" in tree.sources[n].split("+") for n in accepted[1:])
            self.model_steps += 1
            self.model_accepted += model_accepted
            self.model_idle = 0
            if own:
                self.own_steps += 1
                self.own_accepted += model_accepted
        else:
            self.model_idle += 1
        self.own_idle = 0 if own else self.own_idle + 1


def node_matches(tree: DraftTree) -> tuple[int, ...]:
    """[N] the suffix-match length behind each node (0 where none, e.g. the model's nodes)."""
    return tree.matches if tree.matches is not None else (0,) * tree.shape.size


def node_probabilities(tree: DraftTree, stats: SourceStats) -> list[float]:
    """f(v) for every node: the product of its path's acceptance rates (a merged node takes its best source's)."""
    shape, matches, f = tree.shape, node_matches(tree), [1.0] * tree.shape.size
    for node in range(1, shape.size):
        rate = max(stats.rate(s, shape.depths[node], shape.ranks[node], matches[node])
                   for s in tree.sources[node].split("+"))
        f[node] = f[shape.parents[node]] * rate
    return f


def subtree(tree: DraftTree, keep: Sequence[int]) -> DraftTree:
    """The nodes `keep` of a tree without a distribution (ascending, the root and every kept node's parent
    included), renumbered in order."""
    index = {node: i for i, node in enumerate(keep)}
    parents = [-1] + [index[tree.shape.parents[n]] for n in keep[1:]]

    def pick(values):
        return None if values is None else tuple(values[n] for n in keep)

    return DraftTree(tree.tokens[list(keep)], TreeShape(tuple(parents)), None, tree.verify_mode,
                     pick(tree.drafter_ids), pick(tree.sources), pick(tree.matches))


def paying_candidates(tree: DraftTree, f: Sequence[float], cost: Callable[[int], float]) -> tuple[DraftTree, list[float]]:
    """The subtree of the n nodes (root included) of highest f(v), for the n that maximises (1 + sum of their f) /
    cost(n), and their f (see the module docstring)."""
    order = sorted(range(1, len(f)), key=lambda v: (-f[v], v))  # an ancestor before its descendants
    gains = np.cumsum([1.0] + [f[v] for v in order])  # [n]: expected tokens of the best n nodes
    best = max(range(1, len(gains) + 1), key=lambda n: (gains[n - 1] / cost(n), -n))
    keep = sorted([0] + order[: best - 1])
    return subtree(tree, keep), [f[v] for v in keep]
