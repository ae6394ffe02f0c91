"""The decoding loop for B >= 1 rows: draft -> flatten -> one target pass -> verify -> commit, timed per phase.

State between steps, per row: the target's KV cache holds every accepted token except the last one, the *root*,
which the next pass scores together with the row's drafted tree. One step for the rows still running:

    trees  = policy.draft(drafter, roots, ...)              # one DraftTree per row: tokens [N_b], shape, q
    flat   = mask.flatten(tokens [B, N], ..., lengths, start) # trees padded to N with nodes that see themselves
    logits = target(flat, cache)                             # [B, N, V]: p after every node, one pass for all rows
    result = verify(row's tree, row's p, mode, row's generator) for every row
    drop finished rows; cache.commit(...); drafter.observe(...)  # keep the accepted slots only

One row (B = 1) is the same loop with no padding. Rows are right padded (treespec.decode.cache): row b's tokens
fill slots [0, lengths[b]) at the positions a one-row run gives them, so rows that accept different numbers of
tokens never need shifting; a row leaves the batch (and every cache) when it finishes. Each row draws from its own
generator, in the order a one-row run draws, so its output is distributed as the target's on its prompt alone,
and a greedy row equals its one-row run.

This module orders the work and times it; the math is in tree, mask, verify, sampling and cache. What drafts is
a `TreePolicy` over a `Drafter` (both protocols below; treespec.drafters implements them).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import PreTrainedModel

from treespec.decode.cache import cache_length, commit, new_cache, select_rows
from treespec.decode.mask import causal_mask, flatten
from treespec.decode.sampling import SamplingConfig, argmax_tokens, probabilities
from treespec.decode.timing import Clock
from treespec.decode.tree import DraftTree
from treespec.decode.verify import verify
from treespec.models.eagle_head import fused_features, target_features
from treespec.models.lean import LeanDecoder, lean_decoder

Request = tuple[Sequence[int], Sequence[int], Sequence[int]]  # one row's tree level: (nodes, tokens, parents)


@dataclass(frozen=True)
class StepOutcome:
    """What one row's step accepted, as its drafter learns it (`Drafter.observe`)."""

    accepted_nodes: tuple[int, ...]  # drafter node ids of the accepted path, root first
    accepted_tokens: tuple[int, ...]  # tokens of accepted_nodes
    bonus: int
    # [A, F] target features at the accepted nodes, if the drafter reads them; the engine hands them over as a
    #   `PathFeatures`, computed when read (`features()`), so that a drafter that only queues them pays nothing yet
    target_hidden: torch.Tensor | PathFeatures | None = None
    target_argmax: tuple[int, ...] | None = None  # [N] the target's greedy token at every node of the row's tree, in
    #   tree order, if the drafter asks for them (`wants_target_argmax`: lookahead decoding's Jacobi window)

    def features(self) -> torch.Tensor | None:
        """target_hidden as a tensor [A, F] (computed now where the engine left it a `PathFeatures`), or None."""
        hidden = self.target_hidden
        return hidden.tensor() if isinstance(hidden, PathFeatures) else hidden


class Drafter(Protocol):
    """Draft logits for the trees of B rows, one forward per tree level for all rows (treespec.drafters).

    reset(prompts, prefix_features)   start B sequences; prefix_features [B, W, F]: the target's features of each
                                      prompt minus its last token, right padded (only for `wants_target_hidden`)
    root_logits(roots) -> [B, V]      logits after each row's root (the last accepted token)
    node_logits(requests) -> [m_b, V] per row   one tree level: requests[b] = (nodes, tokens, parents) or None
    observe(outcomes)                 each live row's `StepOutcome`, in row order
    select(rows)                      keep only these rows (finished rows leave)
    """

    wants_target_hidden: bool
    target_layers: tuple[int, ...]

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None: ...

    def root_logits(self, roots: Sequence[int]) -> torch.Tensor: ...

    def node_logits(self, requests: Sequence[Request | None]) -> list[torch.Tensor]: ...

    def observe(self, outcomes: Sequence[StepOutcome]) -> None: ...

    def select(self, rows: Sequence[int]) -> None: ...


class TreePolicy(Protocol):
    """How each row's tree is drafted (treespec.drafters.policies)."""

    name: str

    def draft(self, drafter: Drafter | None, roots: Sequence[int], sampling: SamplingConfig,
              generators: Sequence[torch.Generator | None], eos: Collection[int],
              max_levels: Sequence[int]) -> list[DraftTree]:
        """One tree per row, row b of at most `max_levels[b]` levels (a row never needs more than it can emit)."""

    def describe(self) -> dict: ...


@dataclass(frozen=True)
class StepStats:
    tree_size: int  # tokens verified by this target pass, incl. the root
    tree_depth: int  # levels of the drafted tree, incl. the root
    accepted: int  # tokens this pass added to the output (accepted drafts + bonus, after EOS/limit cuts)
    accepted_ranks: tuple[int, ...]  # 0-based sibling rank of each accepted draft node, by depth
    draft_s: float  # phase times of the step this row took part in (shared by the rows of a batch)
    target_s: float
    verify_s: float
    commit_s: float
    accepted_sources: tuple[str, ...] = ()  # what proposed each accepted draft node (trees from several sources)
    offered_sources: tuple[tuple[str, ...], ...] = ()  # per depth d = 1, 2, ... reached: the sources of the
    #   children of the accepted node at depth d - 1, the candidates verified there (trees from several sources)


@dataclass(frozen=True)
class Generation:
    tokens: list[int]  # new tokens only
    steps: list[StepStats]
    prompt_len: int
    stop_reason: str  # "eos" or "max_new_tokens"
    prefill_s: float
    seconds: float  # wall time from the start of the call until this row finished, prefill included
    policy: dict = field(default_factory=dict)

    @property
    def target_passes(self) -> int:
        return len(self.steps)

    @property
    def mean_accepted(self) -> float:
        """Tokens produced per target pass (accepted drafts + bonus)."""
        return len(self.tokens) / max(1, len(self.steps))

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("nan")

    def phase_seconds(self) -> dict[str, float]:
        totals = {"prefill": self.prefill_s}
        for name in ("draft", "target", "verify", "commit"):
            totals[name] = sum(getattr(s, f"{name}_s") for s in self.steps)
        return totals


class _LazyProbs:
    """Target probabilities computed row by row, only for nodes the verification walk visits."""

    def __init__(self, logits: torch.Tensor, sampling: SamplingConfig):
        self.logits, self.sampling, self.rows = logits, sampling, {}

    def __getitem__(self, node: int) -> torch.Tensor:
        if node not in self.rows:
            self.rows[node] = probabilities(self.logits[node], self.sampling)
        return self.rows[node]


@dataclass(frozen=True)
class TargetFeatures:
    """The target's features a drafter reads, from one pass: `last` [B, N, H] the last hidden states and, for a fused
    EAGLE head, `states` {i: [B, N, H]} the hidden states after the `layers` it fuses. They are fused (through the
    final norm, treespec.models.eagle_head.fused_features) only for the rows asked for: the accepted path's."""

    target: PreTrainedModel
    last: torch.Tensor
    states: dict = field(default_factory=dict)
    layers: tuple[int, ...] = ()

    def all(self) -> torch.Tensor:
        """[B, N, F]: every row's features at every node."""
        return fused_features(self.target, self.last, self.states, self.layers) if self.layers else self.last


@dataclass(frozen=True)
class PathFeatures:
    """Row `row`'s target features at `nodes` of one pass (`source`), not yet computed: `tensor()` computes them,
    `gather_features` those of several passes in one call."""

    source: TargetFeatures
    row: int
    nodes: tuple[int, ...]

    def tensor(self) -> torch.Tensor:
        """[len(nodes), F]"""
        return gather_features([self])


def gather_features(paths: Sequence[PathFeatures]) -> torch.Tensor:
    """[sum of len(p.nodes), F]: the features of `paths` (passes of one target, one set of fused layers), in order,
    from one fused_features call: each feature is computed from its own hidden states alone (a norm per row), so
    these are the values each path's `tensor()` gives."""
    first = paths[0].source

    def picked(tensor_of) -> torch.Tensor:  # the paths' rows of one per-pass tensor [B, N, H], concatenated
        return torch.cat([tensor_of(p.source)[p.row, list(p.nodes)] for p in paths])

    last = picked(lambda source: source.last)
    if not first.layers:
        return last
    states = {i: picked(lambda source, i=i: source.states[i]) for i in first.states}
    return fused_features(first.target, last, states, first.layers)


def target_forward(target: PreTrainedModel, lean: LeanDecoder | None, want_features: bool, layers: tuple[int, ...],
                   input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor,
                   cache) -> tuple[torch.Tensor, TargetFeatures | None]:
    """Logits [B, N, V] (and, if asked, what the drafter's target features are made from: `TargetFeatures`) of one
    target forward over the cache, through `lean` (treespec.models.lean) where given: the same arithmetic as
    transformers' modules."""
    if lean is not None:
        hidden, states = lean(input_ids, position_ids, attention_mask, cache, keep=layers)  # [B, N, H]
        logits = target.get_output_embeddings()(hidden)
        if not want_features:
            return logits, None
        return logits, TargetFeatures(target, hidden, states, tuple(layers))
    inputs = dict(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache,
                  use_cache=True)
    if not want_features:
        return target(**inputs).logits, None
    out = target.base_model(**inputs, output_hidden_states=bool(layers))
    return target.get_output_embeddings()(out.last_hidden_state), TargetFeatures(target, target_features(target, out, layers))


class Decoder:
    """The state of a decode of B rows: call `step()` until `live` is empty (`decode` does this).

    live[i] is the prompt index of batch row i; lengths[i] the tokens row i holds in the target's cache (all its
    accepted tokens but its root). `on_tokens(prompt index, new tokens)` is called after every step of every row.
    """

    def __init__(self, target: PreTrainedModel, drafter: Drafter | None, prompts: Sequence[Sequence[int]], *,
                 policy: TreePolicy, sampling: SamplingConfig, max_new_tokens: int,
                 generators: Sequence[torch.Generator | None], eos: Collection[int],
                 on_tokens: Callable[[int, list[int]], None] | None = None, max_length: int | None = None):
        self.target, self.drafter, self.policy, self.sampling = target, drafter, policy, sampling
        self.prompts = [list(p) for p in prompts]
        self.max_new_tokens, self.generators, self.eos, self.on_tokens = int(max_new_tokens), generators, eos, on_tokens
        self.device = next(target.parameters()).device
        self.dtype = next(target.parameters()).dtype
        self.clock = Clock(self.device)
        rows = len(self.prompts)
        if max_length is None:
            max_length = max(len(p) for p in self.prompts) + self.max_new_tokens + 1
        self.want_features = bool(getattr(drafter, "wants_target_hidden", False))
        self.layers = tuple(getattr(drafter, "target_layers", ()))  # a fused EAGLE head's target layers
        self.want_argmax = bool(getattr(drafter, "wants_target_argmax", False))
        self.lean = lean_decoder(target)  # tree passes in fewer steps

        self.start = self.clock()
        self.cache = new_cache(target, max_length)
        self.lengths = [len(p) - 1 for p in self.prompts]
        prefix_features = self._prefill()
        if drafter is not None:
            drafter.reset(self.prompts, prefix_features)
        self.prefill_s = self.clock() - self.start

        self.live = list(range(rows))
        self.roots = [p[-1] for p in self.prompts]
        self.outputs: list[list[int]] = [[] for _ in range(rows)]
        self.steps: list[list[StepStats]] = [[] for _ in range(rows)]
        self.stop_reasons = ["max_new_tokens"] * rows
        self.seconds = [0.0] * rows

    def _prefill(self) -> torch.Tensor | None:
        """Every prompt minus its last token through the target (right padded), as one C call where the target's
        passes run in C (treespec.models.native_pass: the modules' values), else through transformers' modules (rows
        of one length: its own causal pass, as `generate` runs it); the drafter's features [B, W, F] if it reads
        them."""
        width = max(self.lengths)
        if width == 0:
            return None
        rows = len(self.prompts)
        ids = torch.zeros(rows, width, dtype=torch.long)
        for b, prompt in enumerate(self.prompts):
            ids[b, : self.lengths[b]] = torch.as_tensor(prompt[:-1])
        if self.lean is not None and self.lean.native is not None:
            mask = causal_mask(torch.as_tensor(self.lengths), width, self.dtype).to(self.device)
            hidden, states = self.lean(ids.to(self.device), torch.arange(width, device=self.device)[None].expand(rows, -1),
                                       mask, self.cache, keep=self.layers)
            return TargetFeatures(self.target, hidden, states, self.layers).all() if self.want_features else None
        inputs = dict(input_ids=ids.to(self.device), cache=self.cache, use_cache=True,
                      output_hidden_states=bool(self.layers))
        if min(self.lengths) < width:
            inputs.update(position_ids=torch.arange(width)[None].expand(rows, -1).to(self.device),
                          attention_mask=causal_mask(torch.as_tensor(self.lengths), width, self.dtype).to(self.device))
        out = self.target.base_model(**inputs)
        return target_features(self.target, out, self.layers) if self.want_features else None

    def step(self) -> None:
        """One draft + target pass + verify + commit for every live row."""
        t0 = self.clock()
        remaining = [self.max_new_tokens - len(self.outputs[r]) for r in self.live]
        trees = self.policy.draft(self.drafter, self.roots, self.sampling, [self.generators[r] for r in self.live],
                                  self.eos, remaining)
        t1 = self.clock()
        width = max(t.shape.size for t in trees)
        tokens = torch.zeros(len(trees), width, dtype=torch.long)
        for b, tree in enumerate(trees):
            tokens[b, : tree.shape.size] = tree.tokens.cpu()
        start = cache_length(self.cache)
        flat = flatten(tokens.to(self.device), [t.shape.parents for t in trees], [t.shape.depths for t in trees],
                       self.lengths, start, self.dtype)
        logits, features = target_forward(self.target, self.lean, self.want_features, self.layers, flat.input_ids,
                                          flat.position_ids, flat.attention_mask, self.cache)  # [B, N, V]
        argmax = argmax_tokens(logits) if self.want_argmax else None  # [B][N]
        t2 = self.clock()
        results = []
        for b, tree in enumerate(trees):
            row_logits = logits[b, : tree.shape.size]
            probs = row_logits if self.sampling.greedy else _LazyProbs(row_logits, self.sampling)
            results.append(verify(tree.tokens.tolist(), tree.shape.children, probs, tree.draft_probs, tree.verify_mode,
                                  self.generators[self.live[b]]))
        t3 = self.clock()
        news, keep = [], []
        for b, (tree, result) in enumerate(zip(trees, results)):
            row = self.live[b]
            row_tokens = tree.tokens.tolist()
            new = [row_tokens[n] for n in result.accepted[1:]] + [result.bonus]
            cut = next((i + 1 for i, t in enumerate(new) if t in self.eos), len(new))
            new = new[: min(cut, remaining[b])]
            self.outputs[row].extend(new)
            news.append(new)
            if new[-1] in self.eos:
                self.stop_reasons[row] = "eos"
            elif len(self.outputs[row]) < self.max_new_tokens:
                keep.append(b)
        if keep and len(keep) < len(trees):
            select_rows(self.cache, keep)
            if self.drafter is not None:
                self.drafter.select(keep)
        if keep:
            kept = [results[b] for b in keep]
            self.lengths = commit(self.cache, [self.lengths[b] for b in keep], start, [r.accepted for r in kept])
            if self.drafter is not None:
                self.drafter.observe([self._outcome(trees[b], results[b], features, b, argmax) for b in keep])
        t4 = self.clock()
        for b, (tree, result, new) in enumerate(zip(trees, results, news)):
            shape, row = tree.shape, self.live[b]
            ranks = tuple(shape.ranks[n] for n in result.accepted[1:])[: len(new)]  # drafts that reached the output
            sources = tuple(tree.sources[n] for n in result.accepted[1:])[: len(new)] if tree.sources else ()
            offered = tuple(tuple(tree.sources[c] for c in shape.children[n]) for n in result.accepted[: len(new)]
                            if shape.children[n]) if tree.sources else ()
            self.steps[row].append(StepStats(shape.size, shape.levels, len(new), ranks, t1 - t0, t2 - t1, t3 - t2,
                                             t4 - t3, sources, offered))
            if self.on_tokens is not None:
                self.on_tokens(row, new)
            if b not in keep:
                self.seconds[row] = t4 - self.start
        self.roots = [results[b].bonus for b in keep]
        self.live = [self.live[b] for b in keep]

    @staticmethod
    def _outcome(tree: DraftTree, result, features: TargetFeatures | None, b: int,
                 argmax: list[list[int]] | None) -> StepOutcome:
        """Row b's accepted path in the drafter's node ids, with the target's features along it and its greedy
        tokens at the tree's nodes if they were asked."""
        ids, tokens = tree.drafter_ids, tree.tokens.tolist()
        nodes = tuple(ids[n] for n in result.accepted) if ids is not None else result.accepted
        path_features = PathFeatures(features, b, tuple(result.accepted)) if features is not None else None
        greedy = tuple(argmax[b][: tree.shape.size]) if argmax is not None else None
        return StepOutcome(nodes, tuple(tokens[n] for n in result.accepted), result.bonus, path_features, greedy)

    def generations(self) -> list[Generation]:
        describe = self.policy.describe()
        return [Generation(self.outputs[r], self.steps[r], len(p), self.stop_reasons[r], self.prefill_s, self.seconds[r],
                           dict(describe)) for r, p in enumerate(self.prompts)]


@torch.inference_mode()
def decode(target: PreTrainedModel, drafter: Drafter | None, prompts: Sequence[Sequence[int]], **options
           ) -> list[Generation]:
    """Run a `Decoder` (same options) until every row has finished; one `Generation` per prompt."""
    decoder = Decoder(target, drafter, prompts, **options)
    while decoder.live:
        decoder.step()
    return decoder.generations()
