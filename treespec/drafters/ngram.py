"""Prompt lookup: draft continuations found in each row's own text, without a draft model.

Each row keeps its text (the prompt and every token accepted since, ending with the root) and an index of where every
n-gram of `min_ngram`..`max_ngram` tokens ends in it. To propose, the last k tokens (longest k first) are looked up;
every earlier occurrence gives a candidate continuation: the tokens that followed it. Occurrences of the longest
matching suffix come first, then shorter ones; within a length, the more often a continuation recurs and the more
recently it occurred, the earlier. Continuations are merged into a trie (shared prefixes once): a tree, not a chain.

Proposals are deterministic (no distribution is sampled), so the tree is verified with the deterministic rule:
sample x from the target at a node, descend if x is a child, else emit x (greedy: argmax matching). The emitted token
is exactly the target's draw whatever was proposed, so this is lossless (docs/algorithms.md, "Candidates without a
distribution"). A drafter with no model: it reads no logits and costs no forward pass; its tree costs only the
target's rows for its nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from treespec.decode.engine import Request, StepOutcome
from treespec.decode.tree import DraftTree
from treespec.drafters.source_stats import SourceStats
from treespec.errors import ConfigError


@dataclass(frozen=True)
class Candidates:
    """One row's proposal: a trie of continuations of the root. Node 0 is the root; `parents[i] < i`."""

    tokens: tuple[int, ...]  # [N] tokens[0] is the root
    parents: tuple[int, ...]  # [N] parents[0] = -1
    match: tuple[int, ...]  # [N] the length of the suffix whose occurrence proposed the node (0 for the root)
    support: tuple[int, ...]  # [N] how many occurrences proposed the node's path
    sources: tuple[str, ...] | None = None  # [N] what proposed each node ("" for the root); None: all "ngram"


class NGramIndex:
    """Where each n-gram of one text ends, kept up to date as tokens are appended."""

    def __init__(self, tokens: Sequence[int], min_ngram: int, max_ngram: int):
        self.tokens: list[int] = []
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> the indices of its last token, ascending
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.tokens.append(int(token))
            end = len(self.tokens) - 1
            for k in range(self.min_ngram, self.max_ngram + 1):
                if end + 1 >= k:
                    self.ends.setdefault(tuple(self.tokens[end + 1 - k:]), []).append(end)

    def continuations(self, depth: int, limit: int) -> list[tuple[int, tuple[int, ...]]]:
        """Up to `limit` (match length, continuation of up to `depth` tokens) after earlier occurrences of the text's
        last k tokens, k from the longest down, most recent occurrence first within a length."""
        out, last = [], len(self.tokens) - 1
        for k in range(min(self.max_ngram, len(self.tokens) - 1), self.min_ngram - 1, -1):
            for end in reversed(self.ends.get(tuple(self.tokens[last + 1 - k:]), ())):
                if end < last:
                    follow = tuple(self.tokens[end + 1: end + 1 + depth])
                    if follow:
                        out.append((k, follow))
                        if len(out) >= limit:
                            return out
        return out


Continuation = tuple  # (match length, tokens) or (match length, tokens, source); source "ngram" when left out


def build_trie(root: int, continuations: Sequence[Continuation], budget: int) -> Candidates:
    """The continuations merged into a trie of at most `budget` nodes (root included): a node's children ranked by
    the longest match that proposed them, then by how many continuations share them, then by first appearance. A
    node's source names every source that proposed it, joined by "+" in sorted order."""
    stats: dict[tuple[int, ...], list] = {}  # path -> [longest match, support, first index, sources]
    for index, (match, follow, *source) in enumerate(continuations):
        for depth in range(1, len(follow) + 1):
            entry = stats.setdefault(follow[:depth], [match, 0, index, set()])
            entry[0], entry[1] = max(entry[0], match), entry[1] + 1
            entry[3].add(source[0] if source else "ngram")
    order = sorted(stats, key=lambda p: (-stats[p][0], -stats[p][1], stats[p][2], len(p)))  # best paths first
    kept: set[tuple[int, ...]] = set()
    for path in order:
        if len(kept) >= budget - 1:
            break
        if all(path[:d] in kept for d in range(1, len(path))):
            kept.add(path)
    children: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for path in kept:
        children.setdefault(path[:-1], []).append(path)
    tokens, parents, match, support, sources = [int(root)], [-1], [0], [len(continuations)], [""]
    frontier = [((), 0)]
    while frontier:  # breadth-first, siblings by rank
        nxt = []
        for path, node in frontier:
            for child in sorted(children.get(path, ()), key=lambda p: (-stats[p][0], -stats[p][1], stats[p][2])):
                tokens.append(child[-1])
                parents.append(node)
                match.append(stats[child][0])
                support.append(stats[child][1])
                sources.append("+".join(sorted(stats[child][3])))
                nxt.append((child, len(tokens) - 1))
        frontier = nxt
    return Candidates(tuple(tokens), tuple(parents), tuple(match), tuple(support), tuple(sources))


def graft(candidates: Candidates, chain: Sequence[int], source: str) -> Candidates:
    """The trie with the path root -> chain[0] -> chain[1] -> ... added (nodes already there gain `source`)."""
    tokens, parents = list(candidates.tokens), list(candidates.parents)
    match, support = list(candidates.match), list(candidates.support)
    sources = list(candidates.sources or ("",) + ("ngram",) * (len(tokens) - 1))
    node = 0
    for token in chain:
        child = next((c for c in range(node + 1, len(tokens)) if parents[c] == node and tokens[c] == int(token)), None)
        if child is None:
            tokens.append(int(token))
            parents.append(node)
            match.append(0)
            support.append(0)
            sources.append(source)
            child = len(tokens) - 1
        elif source not in sources[child].split("+"):
            sources[child] = "+".join(sorted(sources[child].split("+") + [source]))
        node = child
    return Candidates(tuple(tokens), tuple(parents), tuple(match), tuple(support), tuple(sources))


class NGramDrafter:
    """Prompt lookup over B rows (see the module docstring); a `Drafter` without logits: policies call `propose`.
    Each row also keeps the acceptance of every source in the trees it was handed (`note_trees`, `stats`), which
    the policies of treespec.drafters.sources plan with."""

    wants_target_hidden = False
    target_layers: tuple[int, ...] = ()

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1, max_matches: int = 16):
        if not 1 <= min_ngram <= max_ngram:
            raise ConfigError(f"n-gram lengths must satisfy 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram, self.max_matches = max_ngram, min_ngram, max_matches
        self.rows: list[NGramIndex] = []
        self.stats: list[SourceStats] = []
        self._trees: list[DraftTree | None] = []

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        self.rows = [NGramIndex(p, self.min_ngram, self.max_ngram) for p in prompts]
        self.stats = [SourceStats() for _ in prompts]
        self._trees = [None] * len(prompts)

    def propose(self, roots: Sequence[int], budget: int, depths: Sequence[int]) -> list[Candidates]:
        """Each row's trie of at most `budget` nodes and depths[b] levels (root included) after its root."""
        out = []
        for row, root, depth in zip(self.rows, roots, depths):
            if row.tokens[-1] != int(root):
                raise ValueError("the n-gram drafter's text does not end with the row's root")
            found = row.continuations(depth - 1, self.max_matches) if depth > 1 and budget > 1 else []
            out.append(build_trie(root, found, budget))
        return out

    def root_logits(self, roots: Sequence[int]) -> torch.Tensor:
        raise ConfigError("the n-gram drafter proposes candidates, not logits: use it with policies.NGram or Hybrid")

    def node_logits(self, requests: Sequence[Request | None]) -> list[torch.Tensor]:
        raise ConfigError("the n-gram drafter proposes candidates, not logits: use it with policies.NGram or Hybrid")

    def note_trees(self, trees: Sequence[DraftTree]) -> None:
        """The trees the policy built from this step's proposals (whatever else they hold), counted at `observe`."""
        self._trees = list(trees)

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        """Count each row's noted tree against its outcome; append its accepted tokens after its root and the bonus
        (the next root)."""
        for b, (row, outcome) in enumerate(zip(self.rows, outcomes)):
            tree = self._trees[b] if b < len(self._trees) else None
            if tree is not None and tree.sources is not None:
                self.stats[b].count(tree, tree.token_path(outcome.accepted_tokens))
            row.extend([*outcome.accepted_tokens[1:], outcome.bonus])

    def select(self, rows: Sequence[int]) -> None:
        self.rows = [self.rows[r] for r in rows]
        self.stats = [self.stats[r] for r in rows]
        if self._trees:  # rows leave between the draft and `observe`
            self._trees = [self._trees[r] for r in rows]
