"""Train a `TreespecDraftForCausalLM` to imitate a target from self-distillation shards (distill_data.py).

Loss at every answer position: cross-entropy of the draft's distribution over its reduced vocabulary
against the target's top-k distribution (renormalised over the top-k tokens the draft can emit), i.e.
forward KL up to a constant. Held-out metrics: `agree_top1` = P(draft argmax == target argmax), the
teacher-forced estimate of the rank-1 acceptance P_1 on greedy answers, and `target_in_top4`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from treespec.draft_model import TreespecDraftConfig, TreespecDraftForCausalLM


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
def agreement(draft: TreespecDraftForCausalLM, examples: Sequence[Example], pad_id: int,
              tokens_per_batch: int = 8192) -> dict[str, float]:
    """Teacher-forced agreement with the target on `examples`: top-1 and target-argmax-in-draft-top-4,
    over all answer positions and over greedy answers only (the P_1 estimate)."""
    draft.eval()
    hits = {"agree_top1": [0, 0], "target_in_top4": [0, 0], "greedy_agree_top1": [0, 0]}
    for chunk in token_batches(examples, tokens_per_batch, random.Random(0)):
        batch = collate(chunk, pad_id)
        _, logits, _ = distill_loss(draft, batch)
        target_top1 = batch.top_ids[:, 0]
        top4 = logits.topk(4, dim=-1).indices
        top1_hit = top4[:, 0] == target_top1
        greedy_rows = torch.cat([torch.full((len(e.input_ids) - e.prompt_len,), e.greedy) for e in chunk])
        for key, hit, mask in (("agree_top1", top1_hit, None),
                               ("target_in_top4", (top4 == target_top1[:, None]).any(-1), None),
                               ("greedy_agree_top1", top1_hit, greedy_rows)):
            selected = hit if mask is None else hit[mask]
            hits[key][0] += int(selected.sum())
            hits[key][1] += selected.numel()
    draft.train()
    return {k: (n / d if d else float("nan")) for k, (n, d) in hits.items()}


def cosine_lr(step: int, total: int, warmup: int, peak: float, floor: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))
