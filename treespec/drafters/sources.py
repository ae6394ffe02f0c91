"""Trees from candidates without a distribution: prompt lookup alone (`NGram`), lookahead decoding alone
(`Lookahead`: a Jacobi window and the n-gram pool it fills, treespec.drafters.lookahead), and hybrid trees (`Hybrid`)
whose branches come from the draft model (or head) and from prompt lookup (and, with `window`, a lookahead pool and
window), under one planned budget.

A node's children are a fixed set of distinct tokens whatever proposed them, so these trees are verified with the
deterministic rule (greedy: argmax matching): lossless for any proposal (docs/algorithms.md). A hybrid tree is the
model policy's tree with the n-gram trie merged into it: a candidate path follows the model's nodes while their tokens
agree and adds new nodes where they part (equal tokens are one node, labelled "model+ngram").

How the budget is split, every step, from what was measured (`SourceStats`, kept by the drafter from every verified
step: P(node accepted | its parent accepted) by source, depth, sibling rank and suffix-match length,
treespec.drafters.source_stats) and what a step costs (`StepCosts`: the
target's t(n), a draft level's c(w) over w tokens; flat and free without a profile):

  * the n-gram trie, first cut to the nodes that pay for their rows alone (`paying_candidates`), and its expected
    accepted tokens E_ng = sum over its nodes of prod of those rates along the path;
  * the model tree's, L_model: the mean of its accepted nodes per step, measured, with `model_prior` counting as
    a few steps (for a planned model tree, the planner's prediction: without it a row took the model's tree only
    after its first probe, `probe` steps into each request, where the planned tree would have paid from the start);
  * n-gram only: (1 + E_ng) / (t(n_ng) + o); with the model: (1 + max(E_ng, L_model)) / (t(n_ng + n_model) +
    c(1 + k) + (levels - 1) c(1) + o), k the accepted tokens the model has not read yet (steps it skipped; the
    prompt, read once whenever the model first drafts, is not counted), which its first level reads before the
    root. A row where the first is the larger takes its n-gram tree alone, except
    when its model is due for a probe: after `probe` steps without the model it drafts again and is measured anew,
    and each probe after which the model still does not pay doubles the wait (up to 8 x `probe`; a step where it
    pays resets it), since a probe's draft pass and catch-up can cost most of a target pass. When every row takes
    its n-gram tree the model does not draft that step (its drafter queues the accepted text, `absorb`). In a row
    that takes the model's tree, an n-gram node joins it when its probability f(v) exceeds G * (t(n + 1) - t(n)) / T,
    what its row costs the pass at the tree's speed G / T.
  * under sampling, a merged tree is verified with the deterministic rule, which accepts the model's top-k less
    often than the model policy's own rule on its q (Sequoia's sampling without replacement). With `model_alone`,
    the model policy as it drafts alone, a row weighs the merged tree, (1 + max(E_joined, L_det)) / (t(n + joined)
    + levels c(1) + o), against the model's own tree, (1 + L_own) / (t(n) + levels c(1) + o), where E_joined sums f
    over the n-gram nodes that would join and L_det, L_own are the model's accepted nodes per step measured under
    each rule. A step where every row takes the model and prefers its own tree (or where the own rule has not run
    for `probe` steps) drafts with `model_alone`: the hybrid is then the model's tree exactly, verified by its rule.

Each row keeps its own statistics and choices, so a row of a batch drafts as it would alone.

On text the model writes from scratch (MT-Bench) the n-gram rates fall and the tree is the model's; on text that
copies its input (editing code) long n-gram chains are accepted and the model's draft passes are skipped.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from treespec.decode.engine import Drafter, StepOutcome
from treespec.decode.sampling import SamplingConfig
from treespec.decode.tree import DraftTree, TreeShape
from treespec.drafters.lookahead import LookaheadDrafter
from treespec.drafters.ngram import Candidates, NGramDrafter
from treespec.drafters.source_stats import SourceStats, node_matches, node_probabilities, paying_candidates
from treespec.errors import ConfigError

CANDIDATE_SOURCES = frozenset({"ngram", "lookahead"})  # what policies draft with a candidate drafter


class StepPrices(Protocol):
    """What a hybrid tree prices its choices with, relative to a one-token target pass (treespec.plan.costs.StepCosts
    at the batch size is one; drafters does not import plan)."""

    overhead: float

    def target_cost(self, nodes: int) -> float: ...

    def draft_cost(self, width: int) -> float: ...


def step_cost(costs: StepPrices | None, nodes: int, levels: int = 0, catch_up: int = 0) -> float:
    """A step of `nodes` target rows and `levels` draft levels of one node, the first of them reading `catch_up`
    tokens before its root, relative to the 1-token pass (flat and free without costs)."""
    if costs is None:
        return 1.0
    draft = costs.draft_cost(1 + catch_up) + costs.draft_cost(1) * (levels - 1) if levels else 0.0
    return costs.target_cost(nodes) + draft + costs.overhead


def _unforwarded(node: int) -> int:
    """The drafter id of a merged tree's node that the model's drafter never saw (its own ids are >= 0)."""
    return -100_000 - node


def _mode(sampling: SamplingConfig) -> str:
    return "greedy" if sampling.greedy else "deterministic"


def candidate_tree(candidates: Candidates, eos: Collection[int], mode: str) -> DraftTree:
    """A trie of candidates (prompt lookup, lookahead) as a DraftTree (nothing below an EOS)."""
    keep, index = [0], {0: 0}
    for node in range(1, len(candidates.tokens)):
        parent = candidates.parents[node]
        if parent in index and (parent == 0 or candidates.tokens[parent] not in eos):
            index[node] = len(keep)
            keep.append(node)
    tokens = [candidates.tokens[n] for n in keep]
    parents = [-1] + [index[candidates.parents[n]] for n in keep[1:]]
    labels = candidates.sources or ("",) + ("ngram",) * (len(candidates.tokens) - 1)
    return DraftTree(torch.tensor(tokens), TreeShape(tuple(parents)), None, mode, None, tuple(labels[n] for n in keep),
                     tuple(candidates.match[n] for n in keep))


@dataclass(frozen=True)
class NGram:
    """Prompt lookup alone: each row's trie of continuations found in its own text (treespec.drafters.ngram), at most
    `budget` nodes and `depth` levels (root included); with `costs` (a `StepPrices`), cut every step to the nodes
    that pay for their target rows by the row's measured acceptance (`paying_candidates`). Needs no draft model."""

    budget: int = 12
    depth: int = 10
    max_ngram: int = 4
    min_ngram: int = 1
    costs: StepPrices | None = field(default=None, compare=False)
    name: str = field(default="ngram")
    sources: tuple[str, ...] = field(default=("ngram",), init=False)

    def __post_init__(self):
        if self.budget < 1 or self.depth < 1:
            raise ConfigError(f"budget and depth must be >= 1, got {self.budget} and {self.depth}")

    def describe(self) -> dict:
        return {"policy": self.name, "budget": self.budget, "depth": self.depth, "max_ngram": self.max_ngram,
                "min_ngram": self.min_ngram}

    def new_ngram_drafter(self) -> NGramDrafter:
        return NGramDrafter(self.max_ngram, self.min_ngram)

    def draft(self, drafter: Drafter, roots: Sequence[int], sampling: SamplingConfig,
              generators: Sequence[torch.Generator | None], eos: Collection[int],
              max_levels: Sequence[int]) -> list[DraftTree]:
        ngram = drafter.ngram if isinstance(drafter, HybridDrafter) else drafter
        proposals = ngram.propose(roots, self.budget, [min(self.depth, m) for m in max_levels])
        trees = [candidate_tree(c, eos, _mode(sampling)) for c in proposals]
        if self.costs is not None:
            trees = [paying_candidates(t, node_probabilities(t, stats), lambda n: step_cost(self.costs, n))[0]
                     for t, stats in zip(trees, ngram.stats)]
        ngram.note_trees(trees)
        return trees


@dataclass(frozen=True)
class Lookahead:
    """Lookahead decoding (treespec.drafters.lookahead): each row's pool continuations of its root (at most `budget`
    nodes and `depth` levels, root included) and its Jacobi window of `window` guesses, n-grams of `ngram_size`; with `costs`
    (a `StepPrices`) the window's rows join a row's tree only where they measurably pay, probed every `probe` steps
    (always without costs). `prompt_lookup` adds the row's own text's continuations (the two model-free sources in
    one trie). Needs no draft model."""

    budget: int = 8
    depth: int = 6
    window: int = 4
    ngram_size: int = 4
    pool_size: int = 8
    prompt_lookup: bool = False
    max_ngram: int = 4
    probe: int = 8
    costs: StepPrices | None = field(default=None, compare=False)
    name: str = field(default="lookahead")
    sources: tuple[str, ...] = field(default=("lookahead",), init=False)

    def __post_init__(self):
        if self.budget < 1 or self.depth < 1 or self.probe < 1:
            raise ConfigError(f"budget, depth and probe must be >= 1, got {self.budget}, {self.depth}, {self.probe}")

    def describe(self) -> dict:
        return {"policy": self.name, "budget": self.budget, "depth": self.depth, "window": self.window,
                "ngram_size": self.ngram_size, "pool_size": self.pool_size, "prompt_lookup": self.prompt_lookup,
                "max_ngram": self.max_ngram}

    def new_ngram_drafter(self) -> LookaheadDrafter:
        return LookaheadDrafter(self.window, self.ngram_size, self.pool_size, self.prompt_lookup, self.max_ngram)

    def draft(self, drafter: LookaheadDrafter, roots: Sequence[int], sampling: SamplingConfig,
              generators: Sequence[torch.Generator | None], eos: Collection[int],
              max_levels: Sequence[int]) -> list[DraftTree]:
        cost = None if self.costs is None else (lambda n: step_cost(self.costs, n))
        proposals = drafter.propose(roots, self.budget, [min(self.depth, m) for m in max_levels], cost, self.probe)
        trees = [candidate_tree(c, eos, _mode(sampling)) for c in proposals]
        drafter.note_trees(trees)
        return trees


class HybridDrafter:
    """A model drafter and an n-gram drafter side by side; the n-gram drafter keeps each row's statistics
    (`SourceStats`) that the Hybrid policy plans with. `observe` hands each outcome to both (the model's as `absorb`
    on steps where it drafted for no row)."""

    wants_target_hidden: bool
    wants_target_argmax: bool
    target_layers: tuple[int, ...]

    def __init__(self, model: Drafter, ngram: NGramDrafter):
        self.model, self.ngram = model, ngram
        self.wants_target_hidden = bool(getattr(model, "wants_target_hidden", False))
        self.wants_target_argmax = bool(getattr(ngram, "wants_target_argmax", False))  # a lookahead window
        self.target_layers = tuple(getattr(model, "target_layers", ()))
        self._model_ran = False
        self._unread_prompt: list[int] = []  # per row, the prompt tokens the model has not read (until it drafts)

    @property
    def stats(self) -> list[SourceStats]:
        return self.ngram.stats

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        self.model.reset(prompts, prefix_features)
        self.ngram.reset(prompts, prefix_features)
        self._model_ran = False
        self._unread_prompt = self.model_pending()

    def model_pending(self) -> list[int]:
        """Per row, the accepted tokens the model reads before it can draft (its catch-up; 0 for a drafter that
        needs none, such as Medusa heads)."""
        pending = getattr(self.model, "pending_lengths", None)
        return pending() if pending is not None else [0] * len(self.stats)

    def skipped_pending(self) -> list[int]:
        """Per row, the catch-up a step with the model is priced with: the text accepted while the model did not
        draft, without the prompt. The prompt is read once per request, whenever the model first drafts, as a model
        drafter alone reads it in the prefill; charged to one step, it made lookup alone look better on every
        request's first steps, so the model first drafted at its probe (the Qwen2.5-Coder pair, [Intel(R) Xeon(R)
        Processor @ 2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07: 8 steps of 1 token at the start of each
        HumanEval answer)."""
        return [max(0, p - u) for p, u in zip(self.model_pending(), self._unread_prompt)]

    def note_trees(self, trees: list[DraftTree], model_ran: bool) -> None:
        """The step's trees (counted at `observe`) and whether the model drafted this step."""
        self.ngram.note_trees(trees)
        self._model_ran = model_ran

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        if self._model_ran:  # it drafted for every row, having read each row's pending text first
            self.model.observe(outcomes)
            self._unread_prompt = [0] * len(self._unread_prompt)
        else:
            self.model.absorb(outcomes)
        self.ngram.observe(outcomes)

    def select(self, rows: Sequence[int]) -> None:
        self.model.select(rows)
        self.ngram.select(rows)
        self._unread_prompt = [self._unread_prompt[r] for r in rows]

    def root_logits(self, roots):
        return self.model.root_logits(roots)

    def node_logits(self, requests):
        return self.model.node_logits(requests)


def merge(model_tree: DraftTree, candidates: DraftTree, keep: Sequence[bool]) -> DraftTree:
    """The model's tree with the candidate nodes marked in `keep` (their ancestors kept) merged in (see the module
    docstring); new nodes come after the model's, never forwarded by its drafter."""
    tokens = model_tree.tokens.tolist()
    parents = list(model_tree.shape.parents)
    sources = list(model_tree.sources or ("",) + ("model",) * (len(tokens) - 1))
    ids = list(model_tree.drafter_ids if model_tree.drafter_ids is not None else range(len(tokens)))
    matches = list(node_matches(model_tree))
    cand_matches = node_matches(candidates)
    children: dict[int, dict[int, int]] = {}
    for node in range(1, len(tokens)):
        children.setdefault(parents[node], {})[tokens[node]] = node
    where = {0: 0}  # candidate node -> merged node
    cand_tokens = candidates.tokens.tolist()
    labels = candidates.sources or ("",) + ("ngram",) * (len(cand_tokens) - 1)
    for node in range(1, candidates.shape.size):
        parent = where.get(candidates.shape.parents[node])
        if parent is None or not keep[node]:
            continue
        token = cand_tokens[node]
        found = children.setdefault(parent, {}).get(token)
        if found is None:
            found = len(tokens)
            tokens.append(token)
            parents.append(parent)
            sources.append(labels[node])
            ids.append(_unforwarded(found))
            matches.append(cand_matches[node])
            children[parent][token] = found
        else:
            sources[found] = "+".join(sorted(set(sources[found].split("+")) | set(labels[node].split("+"))))
            matches[found] = max(matches[found], cand_matches[node])
        where[node] = found
    return DraftTree(torch.tensor(tokens, device=model_tree.tokens.device), TreeShape(tuple(parents)), None,
                     model_tree.verify_mode, tuple(ids), tuple(sources), tuple(matches))


@dataclass(frozen=True)
class Hybrid:
    """The `model` policy's tree (Dynamic, or a static or adaptive one drafting the model's top-k under sampling:
    children="deterministic") and the n-gram trie (`ngram_budget` nodes, `ngram_depth` levels) merged under the
    plan of the module docstring; `costs` (a `StepPrices`, such as treespec.plan.costs.StepCosts at the batch size)
    price its choices. A row whose model has not drafted for `probe` steps (more after probes that did not pay) drafts
    with it again, so that its measured worth follows the text (as the lookahead window is probed). `model_alone`:
    the model policy as it drafts alone under sampling (its own rule, with q), for the steps where its tree is worth
    more than the merged one (see the module docstring); None: the merged tree every step. `model_prior`: the model
    tree's accepted nodes per step expected before it has drafted in a row, with the weight of a few steps
    (source_stats.PRIOR_STEPS; the planner's prediction for a planned tree, treespec.app.configs.build_policy)."""

    model: object
    ngram_budget: int = 12
    ngram_depth: int = 10
    max_ngram: int = 4
    min_ngram: int = 1
    window: int = 0
    ngram_size: int = 4
    pool_size: int = 8
    probe: int = 8
    costs: StepPrices | None = field(default=None, compare=False)
    model_alone: object | None = None
    model_prior: float = 1.0
    name: str = field(default="hybrid")
    sources: tuple[str, ...] = field(default=("model", "ngram"), init=False)

    def __post_init__(self):
        if any(getattr(m, "sources", ("model",)) != ("model",) for m in (self.model, self.model_alone) if m is not None):
            raise ConfigError("a hybrid tree's model policy drafts from the model (Static, Dynamic, Adaptive)")

    def describe(self) -> dict:
        inner = self.model.describe()
        return {"policy": self.name, "model_policy": inner, "budget": inner.get("budget", 1) + self.ngram_budget - 1,
                "depth": max(inner.get("depth", 1), self.ngram_depth), "ngram_budget": self.ngram_budget,
                "ngram_depth": self.ngram_depth, "max_ngram": self.max_ngram, "min_ngram": self.min_ngram,
                "model_prior": round(self.model_prior, 4),
                **({"window": self.window, "ngram_size": self.ngram_size, "pool_size": self.pool_size}
                   if self.window else {})}

    def new_ngram_drafter(self) -> NGramDrafter:
        if self.window:  # prompt lookup and a lookahead pool in one candidate drafter
            return LookaheadDrafter(self.window, self.ngram_size, self.pool_size, True, self.max_ngram, self.min_ngram)
        return NGramDrafter(self.max_ngram, self.min_ngram)

    def draft(self, drafter: HybridDrafter, roots: Sequence[int], sampling: SamplingConfig,
              generators: Sequence[torch.Generator | None], eos: Collection[int],
              max_levels: Sequence[int]) -> list[DraftTree]:
        if not sampling.greedy and getattr(self.model, "children", "deterministic") != "deterministic":
            raise ConfigError("under sampling a hybrid tree's model policy must draft its top-k: children=deterministic "
                              "(or a Dynamic policy), since the merged tree is verified with the deterministic rule")
        mode = _mode(sampling)
        depths = [min(self.ngram_depth, m) for m in max_levels]
        if self.window:  # the lookahead window's rows priced as the candidates' share of the pass
            cost = None if self.costs is None else (lambda n: step_cost(self.costs, n))
            proposals = drafter.ngram.propose(roots, self.ngram_budget, depths, cost, self.probe)
        else:
            proposals = drafter.ngram.propose(roots, self.ngram_budget, depths)
        ngram_trees = [candidate_tree(c, eos, mode) for c in proposals]
        found = [node_probabilities(t, stats) for t, stats in zip(ngram_trees, drafter.stats)]
        if self.costs is not None and not self.window:  # the trie cut to what pays alone (the window is priced apart)
            ngram_trees, found = map(list, zip(*[paying_candidates(t, f, lambda n: step_cost(self.costs, n))
                                                 for t, f in zip(ngram_trees, found)]))
        inner = self.model.describe()
        model_nodes, levels = inner.get("budget", 1), max(0, inner.get("depth", 1) - 1)
        lengths = [stats.model_length(prior=self.model_prior) for stats in drafter.stats]
        alone = [(1 + sum(f[1:])) / step_cost(self.costs, len(f)) for f in found]
        both = [(1 + max(sum(f[1:]), length)) / step_cost(self.costs, len(f) + model_nodes - 1, levels, pending)
                for f, length, pending in zip(found, lengths, drafter.skipped_pending())]
        use_model = [model_nodes > 1 and self._takes_model(b > a, stats)  # a one-node model tree drafts nothing
                     for a, b, stats in zip(alone, both, drafter.stats)]
        if not any(use_model):  # the model drafts for no row: its passes are skipped (absorb)
            drafter.note_trees(ngram_trees, model_ran=False)
            return ngram_trees
        if (self.model_alone is not None and not sampling.greedy and all(use_model)
                and all(self._prefers_own(f, t.sources, model_nodes, levels, stats)
                        for f, t, stats in zip(found, ngram_trees, drafter.stats))):
            trees = [replace(t, sources=("",) + ("model",) * (t.shape.size - 1))
                     for t in self.model_alone.draft(drafter.model, roots, sampling, generators, eos, max_levels)]
            drafter.note_trees(trees, model_ran=True)
            return trees
        model_trees = self.model.draft(drafter.model, roots, sampling, generators, eos, max_levels)
        trees = []
        for row, (model_tree, ngram_tree, f) in enumerate(zip(model_trees, ngram_trees, found)):
            if not use_model[row]:  # its n-gram tree alone; the model's nodes for it were drafted for the others
                size = ngram_tree.shape.size
                trees.append(DraftTree(ngram_tree.tokens, ngram_tree.shape, None, mode,
                                       (0,) + tuple(_unforwarded(n) for n in range(1, size)), ngram_tree.sources,
                                       ngram_tree.matches))
                continue
            model_tree = DraftTree(model_tree.tokens, model_tree.shape, None, mode, model_tree.drafter_ids,
                                   ("",) + ("model",) * (model_tree.shape.size - 1))
            keep = self._joins(f, ngram_tree.sources, model_tree.shape.size, levels, lengths[row])
            trees.append(merge(model_tree, ngram_tree, keep))
        drafter.note_trees(trees, model_ran=True)
        return trees

    def _takes_model(self, pays: bool, stats: SourceStats) -> bool:
        """Whether a row drafts with the model this step: where it `pays` by the measured figures, or as a probe
        (the model idle for `probe` steps, doubled after each probe that did not make it pay, at most 8 x `probe`,
        and back to `probe` once it pays), which measures its worth on the text anew."""
        if stats.probing or pays:  # the first decision after a probe judges it
            stats.probe_misses = 0 if pays else stats.probe_misses + 1
            stats.probing = False
        if pays:
            return True
        stats.probing = stats.model_idle >= self.probe * 2 ** min(stats.probe_misses, 3)
        return stats.probing

    def _prefers_own(self, found: Sequence[float], sources: Sequence[str], n: int, levels: int,
                     stats: SourceStats) -> bool:
        """Whether a row's step is worth more as the model's own tree (verified by its own sampling rule) than as
        the merged one (see the module docstring), or the own rule is due for a probe."""
        if stats.own_idle >= self.probe:
            return True
        deterministic = stats.model_length("deterministic", self.model_prior)
        joined = [v for v, kept in enumerate(self._joins(found, sources, n, levels, deterministic)) if kept and v]
        merged = (1 + max(sum(found[v] for v in joined), deterministic)) / step_cost(self.costs, n + len(joined), levels)
        return (1 + stats.model_length("own", self.model_prior)) / step_cost(self.costs, n, levels) >= merged

    def _joins(self, found: Sequence[float], sources: Sequence[str], n: int, levels: int, length: float) -> list[bool]:
        """Which nodes of a row's n-gram trie join a model tree of n nodes (the root always): those whose probability
        `found` beats what their row costs at the model tree's speed, and a lookahead window's."""
        speed = (1 + length) / step_cost(self.costs, n, levels)  # tokens per unit of step time, the model's tree alone
        extra = step_cost(self.costs, n + 1, levels) - step_cost(self.costs, n, levels)
        return [True] + [found[v] > speed * extra or "jacobi" in sources[v].split("+") for v in range(1, len(found))]
