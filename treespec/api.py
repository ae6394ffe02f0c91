"""The public decoding functions: `generate` (one prompt), `generate_batch` (B prompts), `autoregressive`.

Each checks the request, builds the drafter the tree policy needs (treespec.drafters.drafter_for) and runs the one
engine (treespec.decode.engine) over the prompts' rows: `generate` is `generate_batch` of one prompt, with a
streamer. Random streams: `seed=s` gives row b a generator seeded with s + b (or seed[b] from a sequence), drawn
from in the order a one-row run draws, so `generate_batch(..., seed=s)[b]` is distributed as (and, greedy, equal
to) `generate(prompts[b], seed=s + b)`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel

from treespec.decode.engine import Generation, StepStats, TreePolicy, decode
from treespec.decode.sampling import SamplingConfig
from treespec.drafters import drafter_for
from treespec.drafters.policies import as_policy, policy_sources
from treespec.errors import ConfigError
from treespec.models.layer_skip import LayerSkip
from treespec.models.loading import check_pair

__all__ = ["Generation", "StepStats", "autoregressive", "generate", "generate_batch"]


def prompt_ids(input_ids) -> list[int]:
    """One prompt's token ids as a list: a list, a 1-D tensor, or a [1, T] tensor."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2 and input_ids.shape[0] == 1:
            input_ids = input_ids[0]
        if input_ids.dim() != 1:
            raise ConfigError(f"input_ids must be 1-D (one prompt), got shape {tuple(input_ids.shape)}")
        input_ids = input_ids.tolist()
    ids = [int(t) for t in input_ids]
    if not ids:
        raise ConfigError("the prompt is empty: input_ids needs at least one token")
    return ids


def context_limit(model: PreTrainedModel) -> int | None:
    """The model's context length as its config states it (None when it states none)."""
    config = model.config.get_text_config()
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def eos_ids(model: PreTrainedModel, eos_token_id) -> frozenset[int]:
    """The stop tokens: `eos_token_id` (an id or ids), else the model's generation config's."""
    if eos_token_id is None:
        eos_token_id = getattr(model.generation_config, "eos_token_id", None)
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset({eos_token_id})
    return frozenset(int(t) for t in eos_token_id)


def generators(seed, rows: int, device: torch.device) -> list[torch.Generator]:
    """One generator per row: seed s gives row b the seed s + b, a sequence one seed per row, None fresh entropy."""
    if seed is not None and not isinstance(seed, numbers.Integral):
        seeds = [int(s) for s in seed]
        if len(seeds) != rows:
            raise ConfigError(f"seed lists {len(seeds)} seeds for {rows} prompts")
    else:
        seeds = [None if seed is None else int(seed) + b for b in range(rows)]
    out = []
    for s in seeds:
        generator = torch.Generator(device=device)
        if s is None:
            generator.seed()
        else:
            generator.manual_seed(s)
        out.append(generator)
    return out


def check_request(target: PreTrainedModel, draft: PreTrainedModel | None, policy: TreePolicy,
                  prompts: Sequence[list[int]], max_new_tokens: int) -> None:
    """Check a request before any model work (a policy drafting from the model needs a draft that fits)."""
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens}")
    limit = context_limit(target)
    vocab = target.config.get_text_config().vocab_size
    for prompt in prompts:
        if limit is not None and len(prompt) + max_new_tokens > limit:
            raise ConfigError(f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                              f"target's context of {limit}")
        if max(prompt) >= vocab or min(prompt) < 0:
            raise ConfigError(f"prompt token ids must lie in [0, {vocab})")
    if "model" in policy_sources(policy):
        if draft is None:
            raise ConfigError(f"the tree policy '{policy.describe()['policy']}' needs a draft model")
        if isinstance(draft, LayerSkip):
            draft.check(target)
        else:
            check_pair(target, draft)


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
    draft_vocab: torch.Tensor | None = None,
    on_tokens: Callable[[int, list[int]], None] | None = None,
) -> list[Generation]:
    """Speculative decoding of B prompts at once; row b's output is distributed as the target's on prompts[b].

    prompts: token-id lists of any lengths. tree: as for `generate`; every row drafts its own tree (static shapes
    with their own tokens, dynamic and adaptive shapes of their own under the same limits), all rows are verified
    in one target pass, and rows finish on their own (EOS, max_new_tokens) and then leave the batch. seed: an int s
    gives row b the stream of `generate(..., seed=s + b)`; a sequence gives one seed per row. draft_vocab: as for
    `generate`. on_tokens(b, tokens): called with row b's new tokens after every step. Each `Generation`'s step
    timings are those of the batched step it took part in; `seconds` runs until that row finished.
    """
    sampling = SamplingConfig(temperature, top_p, top_k)
    policy: TreePolicy = as_policy(tree)
    if isinstance(prompts, torch.Tensor) or not len(prompts):
        raise ConfigError("prompts must be a non-empty list of token-id lists")
    rows = [prompt_ids(p) for p in prompts]
    check_request(target, draft, policy, rows, max_new_tokens)
    device = next(target.parameters()).device
    max_length = max(len(p) for p in rows) + max_new_tokens + 1
    drafter = drafter_for(policy, draft, target, max_length, draft_vocab)
    return decode(target, drafter, rows, policy=policy, sampling=sampling, max_new_tokens=max_new_tokens,
                  generators=generators(seed, len(rows), device), eos=eos_ids(target, eos_token_id),
                  on_tokens=on_tokens, max_length=max_length)


def generate(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    input_ids: Sequence[int] | torch.Tensor,
    *,
    tree=None,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    streamer: Callable[[list[int]], None] | None = None,
    draft_vocab: torch.Tensor | None = None,
) -> Generation:
    """Speculative decoding with a token tree; the output is distributed exactly as the target's own.

    draft: a causal LM sharing the target's tokenizer, an EAGLE-style head, a `LayerSkip` (the target itself with
        some layers skipped: `treespec.plan.layer_skip.search_layer_skip` chooses them), or None.
    tree: a `TreeShape` (e.g. `treespec.optimizer.sequoia_tree(...)`), a policy from `treespec.policies`
        (Chain, KAry, Paths, Sequoia, Static, Dynamic, Adaptive; NGram, prompt lookup, needs no draft model;
        Hybrid, model and n-gram branches in one tree), or None for plain autoregressive decoding.
    temperature 0 = greedy; top_p and top_k are applied to target and draft alike.
    eos_token_id: None uses the target's generation config; generation stops after the first EOS.
    streamer: called with the new tokens of every step, as soon as they are accepted.
    draft_vocab: token ids [S] the draft proposes from (its q renormalised over them; still lossless).
    """
    on_tokens = (lambda _, tokens: streamer(tokens)) if streamer is not None else None
    return generate_batch(target, draft, [prompt_ids(input_ids)], tree=tree, max_new_tokens=max_new_tokens,
                          temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, eos_token_id=eos_token_id,
                          draft_vocab=draft_vocab, on_tokens=on_tokens)[0]


def autoregressive(
    target: PreTrainedModel,
    input_ids: Sequence[int] | torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    streamer: Callable[[list[int]], None] | None = None,
) -> Generation:
    """One token per target pass through the same loop as `generate` (a one-node tree, no draft)."""
    return generate(target, None, input_ids, tree=None, max_new_tokens=max_new_tokens, temperature=temperature,
                    top_p=top_p, top_k=top_k, seed=seed, eos_token_id=eos_token_id, streamer=streamer)

