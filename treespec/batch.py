"""Batched tree speculation: many prompts at once, each row with its own tree, all verified in one target pass.

One step for the B rows still running:

    trees  = batch_trees.draft_trees(policy, drafter, roots, ...)    # one DraftTree per row, own tokens/shape
    flat   = mask.flatten_batch(tokens [B, N], ..., lengths, start)   # trees padded to N with dummy nodes
    logits = target(flat, cache)                                      # [B, N, V]: one pass for all rows
    result = verify.verify(row's tree, row's p, mode, row's generator) for every row
    drop finished rows (cache.select_rows); cache.commit_rows(...); drafter.observe(...)

Padding: the target's cache (and the drafter's) is *right* padded with per-row lengths: row b's tokens
fill slots [0, lengths[b]) at the positions a single-prompt run gives them, and every step appends the
rows' trees behind the longest row. Committing gathers each row's accepted slots behind its own tokens,
so rows that accept different numbers of tokens never need shifting (left padding would have to
re-align every row to a common end after each step); the gap between a row and the longest row is
masked for every query and is all the padding costs.

Each row has its own random stream: with `seed=s` row b draws from a generator seeded with s + b (or
seed[b] from a sequence), consuming it exactly as `treespec.generate(..., seed=s + b)` on that prompt
alone, so its output is distributed as the target's; greedy rows equal `treespec.generate` (fp32).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from treespec.batch_draft import make_batch_drafter
from treespec.batch_trees import draft_trees
from treespec.cache import cache_length, commit_rows, new_cache, select_rows
from treespec.draft import StepOutcome
from treespec.eagle import causal_mask, target_features
from treespec.engine import Generation, StepStats, _Clock, _eos_ids, _LazyProbs, _prompt_list, _validate
from treespec.errors import ConfigError
from treespec.mask import flatten_batch
from treespec.policies import Dynamic, Static, TreePolicy, as_policy
from treespec.sampling import SamplingConfig
from treespec.verify import verify


def _generators(seed, rows: int, device: torch.device) -> list[torch.Generator]:
    """One generator per row: seed s gives row b the seed s + b, a sequence one seed per row, None fresh entropy."""
    if seed is not None and not isinstance(seed, numbers.Integral):
        seeds = [int(s) for s in seed]
        if len(seeds) != rows:
            raise ConfigError(f"seed lists {len(seeds)} seeds for {rows} prompts")
    else:
        seeds = [None if seed is None else int(seed) + b for b in range(rows)]
    generators = []
    for s in seeds:
        generator = torch.Generator(device=device)
        if s is None:
            generator.seed()
        else:
            generator.manual_seed(s)
        generators.append(generator)
    return generators


class BatchDecoder:
    """The state of a batched decode: call `step()` until `live` is empty (generate_batch does this).

    live[i] is the prompt index of batch row i; lengths[i] the tokens row i holds in the target's cache
    (all accepted tokens but its root); a row leaves the batch (and every cache) when it finishes.
    """

    def __init__(self, target: PreTrainedModel, draft: PreTrainedModel | None, prompts, *, tree, max_new_tokens: int,
                 temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                 seed: int | Sequence[int] | None = None, eos_token_id: int | Sequence[int] | None = None):
        self.sampling = SamplingConfig(temperature, top_p, top_k)
        self.policy: TreePolicy = as_policy(tree)
        if not isinstance(self.policy, (Static, Dynamic)):
            raise ConfigError(f"generate_batch drafts Static and Dynamic trees (treespec.policies), "
                              f"not {type(self.policy).__name__}")
        if isinstance(prompts, torch.Tensor) or not len(prompts):
            raise ConfigError("prompts must be a non-empty list of token-id lists")
        self.prompts = [_prompt_list(p) for p in prompts]
        for prompt in self.prompts:  # the same answer for every prompt: whether the policy needs the draft
            needs_draft = _validate(target, draft, self.policy, prompt, max_new_tokens)
        self.target, self.max_new_tokens = target, int(max_new_tokens)
        self.device = next(target.parameters()).device
        self.dtype = next(target.parameters()).dtype
        self.clock = _Clock(self.device)
        self.generators = _generators(seed, len(self.prompts), self.device)
        self.eos = _eos_ids(target, eos_token_id)
        max_length = max(len(p) for p in self.prompts) + max_new_tokens + 1

        self.start = self.clock()
        self.cache = new_cache(target, max_length)
        self.drafter = make_batch_drafter(draft, target, max_length) if needs_draft else None
        self.want_hidden = bool(getattr(self.drafter, "wants_target_hidden", False))
        self.layers = tuple(getattr(self.drafter, "target_layers", ()))  # a fused EAGLE head's target layers
        self.lengths = [len(p) - 1 for p in self.prompts]
        prefix_hidden = self._prefill()
        if self.drafter is not None:
            self.drafter.reset(self.prompts, prefix_hidden)
        self.prefill_s = self.clock() - self.start

        rows = len(self.prompts)
        self.live = list(range(rows))
        self.roots = [p[-1] for p in self.prompts]
        self.outputs: list[list[int]] = [[] for _ in range(rows)]
        self.steps: list[list[StepStats]] = [[] for _ in range(rows)]
        self.stop_reasons = ["max_new_tokens"] * rows
        self.seconds = [0.0] * rows

    def _prefill(self) -> torch.Tensor | None:
        """Every prompt minus its last token through the target, right padded; features [B, W, H] if wanted."""
        width = max(self.lengths)
        if width == 0:
            return None
        ids = torch.zeros(len(self.prompts), width, dtype=torch.long)
        for b, prompt in enumerate(self.prompts):
            ids[b, : self.lengths[b]] = torch.as_tensor(prompt[:-1])
        lengths = torch.as_tensor(self.lengths)
        positions = torch.arange(width)[None].expand(len(self.prompts), -1)
        out = self.target.base_model(input_ids=ids.to(self.device), position_ids=positions.to(self.device),
                                     attention_mask=causal_mask(lengths, width, self.dtype).to(self.device),
                                     cache=self.cache, use_cache=True, output_hidden_states=bool(self.layers))
        return target_features(self.target, out, self.layers) if self.want_hidden else None

    def _target_pass(self, **inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits [B, N, V] (and, if asked, the drafter's target features [B, N, F]) of one target forward."""
        if not self.want_hidden:
            return self.target(**inputs, use_cache=True).logits, None
        out = self.target.base_model(**inputs, use_cache=True, output_hidden_states=bool(self.layers))
        return self.target.get_output_embeddings()(out.last_hidden_state), target_features(self.target, out, self.layers)

    def step(self) -> None:
        """One draft + target pass + verify + commit for every live row."""
        t0 = self.clock()
        remaining = [self.max_new_tokens - len(self.outputs[r]) for r in self.live]
        trees = draft_trees(self.policy, self.drafter, self.roots, self.sampling,
                            [self.generators[r] for r in self.live], self.eos, remaining)
        t1 = self.clock()
        width = max(t.shape.size for t in trees)
        tokens = torch.zeros(len(trees), width, dtype=torch.long)
        for b, tree in enumerate(trees):
            tokens[b, : tree.shape.size] = tree.tokens.cpu()
        start = cache_length(self.cache)
        flat = flatten_batch(tokens.to(self.device), [t.shape.parents for t in trees], [t.shape.depths for t in trees],
                             self.lengths, start, self.dtype)
        logits, hidden = self._target_pass(input_ids=flat.input_ids, position_ids=flat.position_ids,
                                           attention_mask=flat.attention_mask, cache=self.cache)  # [B, N, V]
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
            row_tokens = tree.tokens.tolist()
            new = [row_tokens[n] for n in result.accepted[1:]] + [result.bonus]
            cut = next((i + 1 for i, t in enumerate(new) if t in self.eos), len(new))
            new = new[: min(cut, remaining[b])]
            self.outputs[self.live[b]].extend(new)
            news.append(new)
            if new[-1] in self.eos:
                self.stop_reasons[self.live[b]] = "eos"
            elif len(self.outputs[self.live[b]]) < self.max_new_tokens:
                keep.append(b)
        if len(keep) < len(trees):
            select_rows(self.cache, keep)
            if self.drafter is not None and keep:
                self.drafter.select(keep)
        kept_results = [results[b] for b in keep]
        self.lengths = commit_rows(self.cache, [self.lengths[b] for b in keep], start, [r.accepted for r in kept_results])
        if self.drafter is not None and keep:
            outcomes = []
            for b, result in zip(keep, kept_results):
                tree, row_tokens = trees[b], trees[b].tokens.tolist()
                ids = tree.drafter_ids
                nodes = tuple(ids[n] for n in result.accepted) if ids is not None else result.accepted
                path_hidden = hidden[b, list(result.accepted)] if hidden is not None else None
                outcomes.append(StepOutcome(nodes, tuple(row_tokens[n] for n in result.accepted), result.bonus,
                                            path_hidden))
            self.drafter.observe(outcomes)
        t4 = self.clock()
        for b, (tree, result, new) in enumerate(zip(trees, results, news)):
            shape = tree.shape
            ranks = tuple(shape.ranks[n] for n in result.accepted[1:])[: len(new)]  # drafts that reached the output
            self.steps[self.live[b]].append(StepStats(shape.size, shape.levels, len(new), ranks, t1 - t0, t2 - t1,
                                                      t3 - t2, t4 - t3))
            if b not in keep:
                self.seconds[self.live[b]] = t4 - self.start
        self.roots = [results[b].bonus for b in keep]
        self.live = [self.live[b] for b in keep]

    def generations(self) -> list[Generation]:
        describe = self.policy.describe()
        return [Generation(self.outputs[r], self.steps[r], len(p), self.stop_reasons[r], self.prefill_s, self.seconds[r],
                           dict(describe)) for r, p in enumerate(self.prompts)]


@torch.inference_mode()
def generate_batch(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    prompts: Sequence[Sequence[int]],
    *,
    tree=None,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | Sequence[int] | None = None,
    eos_token_id: int | Sequence[int] | None = None,
) -> list[Generation]:
    """Speculative decoding of many prompts at once; row b's output is distributed as the target's on prompts[b].

    prompts: token-id lists of any lengths. tree: a `TreeShape` or a Static / Dynamic policy (every row
    drafts its own tree: static shapes with their own tokens, dynamic shapes of their own under the same
    budget), or None (batched autoregressive decoding). All rows are verified in one target pass; rows
    finish on their own (EOS, max_new_tokens) and then leave the batch. seed: an int s gives row b the
    stream of `treespec.generate(..., seed=s + b)`; a sequence gives one seed per row. Each `Generation`'s
    step timings are those of the batched step it took part in; `seconds` runs until that row finished.
    """
    decoder = BatchDecoder(target, draft, prompts, tree=tree, max_new_tokens=max_new_tokens, temperature=temperature,
                           top_p=top_p, top_k=top_k, seed=seed, eos_token_id=eos_token_id)
    while decoder.live:
        decoder.step()
    return decoder.generations()
