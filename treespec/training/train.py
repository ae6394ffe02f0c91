"""Train a draft (the plain `TreespecDraftForCausalLM` or the EAGLE head) to imitate a target from self-distillation
records: the corpus's answers with the target's top-k recomputed by `distill_data.teacher_pass`.

Loss at every answer position: cross-entropy of the draft's distribution over its reduced vocabulary
against the target's top-k distribution (renormalised over the top-k tokens the draft can emit), i.e.
forward KL up to a constant. Held-out metrics: `agree_top1` = P(draft argmax == target argmax), the
teacher-forced estimate of the rank-1 acceptance P_1 on greedy answers, and `target_in_top4`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel

from treespec.decode.mask import additive, causal_mask
from treespec.models.draft_lm import TreespecDraftConfig, TreespecDraftForCausalLM


def init_draft_from_target(
    target: PreTrainedModel,
    output_token_ids: Sequence[int],
    *,
    init_layers: Sequence[int],
    embed_rank: int,
) -> TreespecDraftForCausalLM:
    """A draft with len(init_layers) decoder layers copied from a Llama-style target, the target's final
    norm, an LM head made of the target's output rows for `output_token_ids`, and a rank-`embed_rank`
    SVD factorisation of the target's input embedding."""
    tcfg = target.config
    fields = {k: v for k, v in tcfg.to_dict().items() if k not in ("architectures", "model_type", "transformers_version",
                                                                    "_name_or_path", "quantization_config")}
    fields.update(num_hidden_layers=len(init_layers), tie_word_embeddings=False, embed_rank=embed_rank,
                  output_token_ids=list(output_token_ids), architectures=["TreespecDraftForCausalLM"])
    draft = TreespecDraftForCausalLM(TreespecDraftConfig(**fields))
    with torch.no_grad():
        for i, src in enumerate(init_layers):
            draft.model.layers[i].load_state_dict(target.model.layers[src].state_dict())
        draft.model.norm.load_state_dict(target.model.norm.state_dict())
        draft.lm_head.weight.copy_(target.lm_head.weight[draft.output_ids])
        u, s, vh = torch.linalg.svd(target.model.embed_tokens.weight.float(), full_matrices=False)
        draft.model.embed_tokens.low.weight.copy_(u[:, :embed_rank] * s[:embed_rank])  # [V, r]
        draft.model.embed_tokens.up.weight.copy_(vh[:embed_rank].T)  # [H, r]
    return draft


@dataclass(frozen=True)
class Example:
    """One training sequence: ids [L], and for answer rows a: position P + a - 1 predicts answer token a."""

    input_ids: torch.Tensor  # [L] int64
    prompt_len: int
    top_ids: torch.Tensor  # [A, k] int64, in the draft's reduced vocabulary (-1 = not emittable)
    top_logprobs: torch.Tensor  # [A, k] float32
    greedy: bool
    index: int  # the record's index in the shard data (for per-record side data such as target features)


def make_examples(shard: dict, output_token_ids: Sequence[int], max_len: int) -> list[Example]:
    """Convert shard records to examples with top-k ids mapped into the reduced vocabulary."""
    vocab_index = torch.full((max(max(output_token_ids), int(max(t.max() for t in shard["top_ids"]))) + 1,), -1)
    vocab_index[torch.tensor(output_token_ids)] = torch.arange(len(output_token_ids))
    examples = []
    for b in range(len(shard["input_ids"])):
        ids = shard["input_ids"][b].long()[:max_len]
        plen = shard["prompt_len"][b]
        answer_rows = len(ids) - plen
        if answer_rows <= 0:
            continue
        examples.append(Example(
            input_ids=ids,
            prompt_len=plen,
            top_ids=vocab_index[shard["top_ids"][b][:answer_rows].long()],
            top_logprobs=shard["top_logprobs"][b][:answer_rows].float(),
            greedy=shard["mode"][b] == "greedy",
            index=b,
        ))
    return examples


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # [B, L] right-padded
    attention_mask: torch.Tensor  # [B, L]
    rows: torch.Tensor  # [R, 2] (batch index, position) of every answer prediction
    top_ids: torch.Tensor  # [R, k] reduced-vocab ids, -1 = not emittable
    top_logprobs: torch.Tensor  # [R, k]


def collate(examples: Sequence[Example], pad_id: int) -> Batch:
    width = max(len(e.input_ids) for e in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    rows, top_ids, top_lp = [], [], []
    for b, e in enumerate(examples):
        input_ids[b, : len(e.input_ids)] = e.input_ids
        attention[b, : len(e.input_ids)] = 1
        positions = torch.arange(e.prompt_len - 1, len(e.input_ids) - 1)
        rows.append(torch.stack([torch.full_like(positions, b), positions], dim=1))
        top_ids.append(e.top_ids)
        top_lp.append(e.top_logprobs)
    return Batch(input_ids, attention, torch.cat(rows), torch.cat(top_ids), torch.cat(top_lp))


def token_batches(examples: Sequence[Example], tokens_per_batch: int, rng: random.Random) -> Iterator[list[Example]]:
    """Shuffled batches of similar-length examples holding about `tokens_per_batch` padded tokens each."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i].input_ids), rng.random()))
    batches, current = [], []
    for i in order:
        longest = max([len(examples[j].input_ids) for j in current] + [len(examples[i].input_ids)])
        if current and longest * (len(current) + 1) > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    for batch in batches:
        yield [examples[i] for i in batch]


def distill_loss(draft: TreespecDraftForCausalLM, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Soft cross-entropy against the target's top-k; returns (loss, reduced logits [R, K], target p [R, k])."""
    hidden = draft.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    logits = draft.reduced_logits(hidden[batch.rows[:, 0], batch.rows[:, 1]])  # [R, K]
    log_q = torch.log_softmax(logits.float(), dim=-1)
    emittable = batch.top_ids >= 0
    p = torch.where(emittable, batch.top_logprobs, torch.full_like(batch.top_logprobs, -math.inf)).softmax(-1)
    p = torch.nan_to_num(p)  # rows where no top-k token is emittable contribute nothing
    log_q_top = log_q.gather(1, batch.top_ids.clamp(min=0))  # [R, k]
    loss = -(p * log_q_top).sum(-1).mean()
    return loss, logits, p


@torch.no_grad()
def agreement(score: Callable[[Sequence[Example]], tuple[torch.Tensor | list[torch.Tensor], torch.Tensor]],
              examples: Sequence[Example], tokens_per_batch: int = 8192) -> dict[str, float]:
    """Teacher-forced agreement with the target: top-1 and target-argmax-in-draft-top-4, over all answer
    positions and over greedy answers only (the P_1 estimate). `score(chunk)` returns the draft's reduced
    logits [R, K] and the target's top ids [R, k] (reduced-vocabulary indices) of a chunk's answer rows; it may
    return a list of logits, one per unrolled EAGLE level (`eagle_level_logits`), whose metrics for level d >= 2
    get the suffix `_level{d}` (the estimate at a node d-1 levels below the root, the path being the target's)."""
    hits: dict[str, list[int]] = {}
    for chunk in token_batches(examples, tokens_per_batch, random.Random(0)):
        levels, top_ids = score(chunk)
        target_top1 = top_ids[:, 0]
        greedy_rows = torch.cat([torch.full((len(e.input_ids) - e.prompt_len,), e.greedy) for e in chunk])
        for level, logits in enumerate(levels if isinstance(levels, list) else [levels], start=1):
            suffix = "" if level == 1 else f"_level{level}"
            top4 = logits.topk(4, dim=-1).indices
            top1_hit = top4[:, 0] == target_top1
            for key, hit, mask in (("agree_top1", top1_hit, None),
                                   ("target_in_top4", (top4 == target_top1[:, None]).any(-1), None),
                                   ("greedy_agree_top1", top1_hit, greedy_rows)):
                selected = hit if mask is None else hit[mask]
                counts = hits.setdefault(key + suffix, [0, 0])
                counts[0] += int(selected.sum())
                counts[1] += selected.numel()
    return {k: (n / d if d else float("nan")) for k, (n, d) in hits.items()}


def cosine_lr(step: int, total: int, warmup: int, peak: float, floor: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def load_eagle_start(head, start) -> None:
    """Load a trained head's weights into `head`; a single-layer head may start a fused one, whose `fuse` keeps its
    initialisation, a head with fewer decoder layers starts a deeper one (whose further layers keep theirs), and a
    head whose output vocabulary is a subset of `head`'s (a grown vocabulary) gives its LM-head rows to its own
    tokens, the other rows keeping theirs (the target's). ValueError when the two heads do not fit."""
    state = dict(start.state_dict())
    start_ids = [int(t) for t in start.config.output_token_ids]
    grown = start_ids != [int(t) for t in head.config.output_token_ids]
    if grown:
        position = {int(t): i for i, t in enumerate(head.config.output_token_ids)}
        lacking = [t for t in start_ids if t not in position]
        if lacking:
            raise ValueError(f"the heads do not fit: {len(lacking)} of the start head's output tokens are not in the "
                             f"new head's vocabulary (e.g. {lacking[:5]})")
        rows = state.pop("lm_head.weight")
        state.pop("output_ids", None)
        with torch.no_grad():
            head.lm_head.weight[[position[t] for t in start_ids]] = rows.to(head.lm_head.weight.dtype)
    missing, unexpected = head.load_state_dict(state, strict=False)
    allowed = ("fuse.", "lm_head.", "output_ids") if grown else ("fuse.",)
    start_layers = start.config.num_hidden_layers
    deeper = tuple(f"more_layers.{i - 1}." for i in range(start_layers, head.config.num_hidden_layers))
    if unexpected or any(not key.startswith(allowed + deeper) for key in missing):
        raise ValueError(f"the heads do not fit: missing {missing}, unexpected {unexpected}")


@dataclass(frozen=True)
class EagleBatch:
    """A right-padded batch for the EAGLE head, shifted by one: input position i is draft position i + 1,
    consuming (f_i, x_{i+1}) and estimating f_{i+1}; `rows` index (batch, input position). F is H for a
    single-layer head, k*H for a fused one (the target features it fuses)."""

    input_ids: torch.Tensor  # [B, L-1] tokens x_1 .. x_{L-1}
    features: torch.Tensor  # [B, L-1, F] f_0 .. f_{L-2}
    targets: torch.Tensor  # [B, L-1, F] f_1 .. f_{L-1}
    lengths: torch.Tensor  # [B] valid input positions
    rows: torch.Tensor  # [R, 2]
    top_ids: torch.Tensor  # [R, k]
    top_logprobs: torch.Tensor  # [R, k]


def collate_eagle(examples: Sequence[Example], features: Sequence[torch.Tensor], pad_id: int) -> EagleBatch:
    plain = collate(examples, pad_id)
    width = plain.input_ids.shape[1]
    hidden = features[0].shape[-1]
    feats = torch.zeros(len(examples), width, hidden)
    for b, f in enumerate(features):
        feats[b, : len(f)] = f[:width].float()
    lengths = torch.tensor([len(e.input_ids) - 1 for e in examples])
    rows = plain.rows - torch.tensor([0, 1])  # draft position j is input position j - 1
    return EagleBatch(plain.input_ids[:, 1:], feats[:, :-1], feats[:, 1:], lengths, rows, plain.top_ids,
                      plain.top_logprobs)


def unrolled_mask(lengths: torch.Tensor, width: int, dtype: torch.dtype, level: int = 2) -> torch.Tensor:
    """Additive [B, 1, L, level*L] mask for unrolled pass `level` (>= 2) over the keys of passes 1..level: query j
    sees pass 1's keys 0..j-level+1 (inputs with the target's true features: the context up to the root),
    pass m's key at j-level+m for 2 <= m < level (its tree ancestors) and its own key, as a node
    level-1 levels below the root x_{j-level+2} does."""
    positions = torch.arange(width, device=lengths.device)
    earlier = (positions[None, :] <= positions[:, None] - level + 1)[None] & (positions[None, None, :] < lengths[:, None, None])
    blocks = [earlier.expand(len(lengths), -1, -1)]
    for m in range(2, level + 1):
        ancestor = positions[None, :] == positions[:, None] - level + m  # [L, L]
        blocks.append(ancestor[None].expand(len(lengths), -1, -1))
    return additive(torch.cat(blocks, dim=-1), dtype)


def eagle_hidden(head, features: torch.Tensor, token_embeds: torch.Tensor, lengths: torch.Tensor,
                 unroll: int = 1) -> list[torch.Tensor]:
    """The head's outputs [B, L, H] per unrolled level (the training-time test). Level 1 reads the target's
    features [B, L, H] (fused for a fused head: pairs (f_j, x_{j+1}) at position j + 1); level d reads level
    d-1's outputs instead, one position back, with level 1's keys up to the root and the keys of the levels
    between as context (`unrolled_mask`), which is exactly what the head computes for a node d-1 levels below the root."""

    if unroll < 1:
        raise ValueError(f"unroll must be at least 1, got {unroll}")
    width = token_embeds.shape[1]
    positions = torch.arange(1, width + 1, device=token_embeds.device)[None].expand(len(token_embeds), -1)
    cache = DynamicCache() if unroll > 1 else None
    levels = [head(features, token_embeds, positions, causal_mask(lengths, width, token_embeds.dtype), cache)]
    for level in range(2, unroll + 1):
        drafted = torch.cat([features[:, :1], levels[-1][:, :-1]], dim=1)
        mask = unrolled_mask(lengths, width, token_embeds.dtype, level)
        levels.append(head(drafted, token_embeds, positions, mask, cache))
    return levels


def feature_noise_like(features: torch.Tensor, chunk: int, noise: float, generator: torch.Generator | None) -> torch.Tensor:
    """Gaussian noise for [..., F] features, `noise` times each chunk's RMS (F = k*chunk: per fused layer)."""
    shaped = features.unflatten(-1, (-1, chunk))
    scale = shaped.pow(2).mean(-1, keepdim=True).sqrt()
    return (noise * scale * torch.randn(shaped.shape, generator=generator)).flatten(-2)


def eagle_level_logits(head, embed: torch.nn.Module, batch: EagleBatch, unroll: int) -> list[torch.Tensor]:
    """Reduced logits [R, K] at the answer rows for each of `unroll` levels (no noise): level d's row is what the
    head drafts at a node d-1 levels below the root, every earlier token of the path being the target's."""
    levels = eagle_hidden(head, head.fuse_features(batch.features), embed(batch.input_ids), batch.lengths, unroll)
    return [head.reduced_logits(hidden[batch.rows[:, 0], batch.rows[:, 1]]) for hidden in levels]


def eagle_loss(head, embed: torch.nn.Module, batch: EagleBatch, *, feature_weight: float = 1.0,
               feature_noise: float = 0.0, generator: torch.Generator | None = None, unroll: int = 1):
    """Soft cross-entropy at answer rows plus smooth-L1 between the head's output and the target's next
    feature at every valid position, averaged over the unrolled levels (see `eagle_hidden`). A fused head
    has no target for its output features (it reads them back, but they estimate nothing): its loss is on
    tokens only, as in EAGLE-3. Returns (loss, level-1 reduced logits [R, K], {"ce"[, "feature"]} of the
    last level)."""
    features = batch.features
    if feature_noise > 0:  # robustness to the head's own, imperfect features deeper in a tree
        features = features + feature_noise_like(features, head.config.hidden_size, feature_noise, generator)
    levels = eagle_hidden(head, head.fuse_features(features), embed(batch.input_ids).detach(), batch.lengths, unroll)
    valid = torch.arange(batch.input_ids.shape[1])[None] < batch.lengths[:, None]
    emittable = batch.top_ids >= 0
    p = torch.nan_to_num(torch.where(emittable, batch.top_logprobs, torch.full_like(batch.top_logprobs, -math.inf))
                         .softmax(-1))
    total, first_logits, parts = 0.0, None, {}
    for hidden in levels:
        logits = head.reduced_logits(hidden[batch.rows[:, 0], batch.rows[:, 1]])
        first_logits = logits if first_logits is None else first_logits
        ce = -(p * torch.log_softmax(logits.float(), dim=-1).gather(1, batch.top_ids.clamp(min=0))).sum(-1).mean()
        level_loss, parts = ce, {"ce": ce.item()}
        if not head.fused:
            feature_loss = F.smooth_l1_loss(hidden[valid], batch.targets[valid])
            level_loss, parts["feature"] = ce + feature_weight * feature_loss, feature_loss.item()
        total = total + level_loss / len(levels)
    return total, first_logits, parts
