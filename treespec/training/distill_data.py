"""Self-distillation data: the target answers a prompt pool; we keep its answers and top-k distributions.

A shard (`torch.save` of a dict) holds, per answer b:
  input_ids[b]      [P_b + A_b] int32   chat-formatted prompt followed by the target's answer
  prompt_len[b]     int                 P_b
  top_ids[b]        [A_b, k] int32      the target's k most likely tokens at each answer position
  top_logprobs[b]   [A_b, k] float16    their log-probabilities (temperature 1, full vocabulary)
  mode[b], category[b]                  "greedy" / "t0.7" / ..., the prompt's pool category
Row a of top_* is the target's distribution for answer token a (predicted at sequence position P_b + a - 1).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel


@dataclass(frozen=True)
class SamplingMode:
    name: str
    temperature: float  # 0 = greedy
    weight: float


def assign_modes(n: int, modes: Sequence[SamplingMode], seed: int) -> list[SamplingMode]:
    """A seeded, weighted choice of sampling mode for each of n prompts."""
    rng = random.Random(seed)
    return rng.choices(list(modes), weights=[m.weight for m in modes], k=n)


@torch.no_grad()
def answer_batch(
    target: PreTrainedModel,
    prompts: Sequence[list[int]],
    *,
    temperature: float,
    max_new_tokens: int,
    keep_top: int,
    eos_token_id: int,
    pad_token_id: int,
) -> list[dict]:
    """Generate answers for one left-padded batch; return one record per prompt (see module docstring)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for b, ids in enumerate(prompts):
        input_ids[b, width - len(ids):] = torch.tensor(ids)
        attention[b, width - len(ids):] = 1
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 else {
        "do_sample": False}
    out = target.generate(
        input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
        pad_token_id=pad_token_id, output_logits=True, return_dict_in_generate=True, **sampling,
    )
    new_tokens = out.sequences[:, width:]  # [B, A_max]
    logits = torch.stack(out.logits, dim=1)  # [B, A_max, V]
    records = []
    for b, ids in enumerate(prompts):
        answer = new_tokens[b].tolist()
        length = answer.index(eos_token_id) + 1 if eos_token_id in answer else len(answer)
        logprobs = torch.log_softmax(logits[b, :length].float(), dim=-1)
        top = logprobs.topk(keep_top, dim=-1)
        records.append({
            "input_ids": torch.tensor(list(ids) + answer[:length], dtype=torch.int32),
            "prompt_len": len(ids),
            "top_ids": top.indices.to(torch.int32),
            "top_logprobs": top.values.to(torch.float16),
        })
    return records


def batches_by_length(items: Sequence[int], lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Group item indices into batches of similar length (less padding), in a stable order."""
    order = sorted(items, key=lambda i: lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def merge_shards(shards: Iterable[dict]) -> dict:
    """Concatenate shard dicts field by field."""
    merged: dict[str, list] = {}
    for shard in shards:
        for key, values in shard.items():
            merged.setdefault(key, []).extend(values)
    return merged


def token_frequencies(shard: dict) -> Counter:
    """How often each token id appears in the answers (and, weighted by probability, in the top-k)."""
    counts: Counter = Counter()
    for ids, plen in zip(shard["input_ids"], shard["prompt_len"]):
        counts.update(ids[plen:].tolist())
    return counts


def select_output_vocab(counts: Counter, size: int, always: Iterable[int]) -> list[int]:
    """The `size` most frequent answer tokens, always including `always` (e.g. EOS); sorted ids."""
    chosen = set(always)
    for token, _ in counts.most_common():
        if len(chosen) >= size:
            break
        chosen.add(int(token))
    return sorted(chosen)


@torch.no_grad()
def target_features(target: PreTrainedModel, sequences: Sequence[torch.Tensor], *, tokens_per_batch: int = 4096,
                    pad_token_id: int = 0) -> list[torch.Tensor]:
    """The target's last hidden state (after its final norm: what its LM head reads) at every position of
    every sequence: one [L_b, H] float16 tensor per sequence (right padding, batched by length)."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    batches, current = [], []
    for i in order:  # ascending lengths: the newest member is the longest
        if current and len(sequences[i]) * (len(current) + 1) > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    batches.append(current)
    out: list[torch.Tensor | None] = [None] * len(sequences)
    for batch in batches:
        width = len(sequences[batch[-1]])
        ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(batch):
            ids[row, : len(sequences[i])] = sequences[i].long()
            mask[row, : len(sequences[i])] = 1
        hidden = target.base_model(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, L, H]
        for row, i in enumerate(batch):
            out[i] = hidden[row, : len(sequences[i])].to(torch.float16)
    return out
