"""Self-distillation data: the target answers a prompt pool; the draft learns its distributions.

The corpus (training/corpus.py) keeps only token ids: `generate_answers` makes them (in large batches, in
bf16 where the CPU has it, `compare_precision` measuring what that changes), and `teacher_pass` recomputes
the soft targets when training, one batched forward over the stored sequences (and, for an EAGLE head, the
target's features in the same pass). Records in the training dict, per answer b:
  input_ids[b]      [P_b + A_b] int32   chat-formatted prompt followed by the target's answer
  prompt_len[b]     int                 P_b
  top_ids[b]        [A_b, k] int32      the target's k most likely tokens at each answer position
  top_logprobs[b]   [A_b, k] float16    their log-probabilities (temperature 1, full vocabulary)
  mode[b], category[b]                  "greedy" / "t0.7" / ..., the prompt's pool category
Row a of top_* is the target's distribution for answer token a (predicted at sequence position P_b + a - 1).
`answer_batch` produces such records directly from generation (tests and small experiments).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from treespec.models import eagle_head


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
    input_ids, attention = _left_padded(prompts, pad_token_id)
    width = input_ids.shape[1]
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


def _left_padded(prompts: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, W] ids and attention mask, prompts right-aligned (generation appends on the right)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for b, ids in enumerate(prompts):
        input_ids[b, width - len(ids):] = torch.tensor(list(ids), dtype=torch.long)
        attention[b, width - len(ids):] = 1
    return input_ids, attention


def _right_padded(sequences: Sequence[torch.Tensor], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, W] ids and attention mask, sequences left-aligned (teacher forcing reads every position)."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq.long()
        mask[row, : len(seq)] = 1
    return ids, mask


def _cut_at_eos(answer: list[int], eos_token_id: int | None) -> list[int]:
    return answer[: answer.index(eos_token_id) + 1] if eos_token_id is not None and eos_token_id in answer else answer


@torch.no_grad()
def generate_answers(target: PreTrainedModel, prompts: Sequence[Sequence[int]], *, temperature: float,
                     max_new_tokens: int, eos_token_id: int | None, pad_token_id: int) -> list[list[int]]:
    """The target's answers (token ids, up to and including EOS) to one left-padded batch of prompts; greedy
    when temperature is 0, else sampling from the full distribution at that temperature."""
    input_ids, attention = _left_padded(prompts, pad_token_id)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 else {
        "do_sample": False}
    out = target.generate(input_ids=input_ids.to(target.device), attention_mask=attention.to(target.device),
                          max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id, **sampling)
    return [_cut_at_eos(row.tolist(), eos_token_id) for row in out[:, input_ids.shape[1]:].cpu()]


def length_batches(lengths: Sequence[int], tokens_per_batch: int) -> list[list[int]]:
    """Indices grouped in ascending length so that each batch holds about `tokens_per_batch` padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for i in order:  # ascending lengths: the newest member is the longest
        if current and lengths[i] * (len(current) + 1) > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True)
class TeacherOutput:
    """Per sequence: soft targets over its answer rows and, when asked for, the target's features."""

    top_ids: list[torch.Tensor]  # [A_b, k] int32
    top_logprobs: list[torch.Tensor]  # [A_b, k] float16
    features: list[torch.Tensor] | None  # [L_b, F] float16: treespec.models.eagle_head.target_features (F = H: last hidden state)


@torch.no_grad()
def teacher_pass(target: PreTrainedModel, sequences: Sequence[torch.Tensor], prompt_lens: Sequence[int], *, keep_top: int,
                 features: bool = False, feature_layers: Sequence[int] = (), tokens_per_batch: int = 4096,
                 pad_token_id: int = 0) -> TeacherOutput:
    """Teacher forcing over stored (prompt + answer) sequences, right-padded and batched by length: the target's
    top-`keep_top` log-probabilities (temperature 1) at every answer position, and its features if asked (those
    of `feature_layers` for a fused EAGLE head, treespec.models.eagle_head.target_features)."""
    n = len(sequences)
    top_ids: list = [None] * n
    top_lp: list = [None] * n
    feats: list | None = [None] * n if features else None
    for batch in length_batches([len(s) for s in sequences], tokens_per_batch):
        ids, mask = _right_padded([sequences[i] for i in batch], pad_token_id)
        out = target.base_model(input_ids=ids.to(target.device), attention_mask=mask.to(target.device),
                                output_hidden_states=bool(features and feature_layers))
        hidden = out.last_hidden_state
        chosen = eagle_head.target_features(target, out, feature_layers) if features else None
        for row, i in enumerate(batch):
            length, plen = len(sequences[i]), prompt_lens[i]
            logits = target.get_output_embeddings()(hidden[row, plen - 1: length - 1])  # [A, V]
            top = torch.log_softmax(logits.float(), dim=-1).topk(keep_top, dim=-1)
            top_ids[i], top_lp[i] = top.indices.to(torch.int32).cpu(), top.values.to(torch.float16).cpu()
            if feats is not None:
                feats[i] = chosen[row, :length].to(torch.float16).cpu()
    return TeacherOutput(top_ids, top_lp, feats)


@torch.no_grad()
def target_features(target: PreTrainedModel, sequences: Sequence[torch.Tensor], *, feature_layers: Sequence[int] = (),
                    tokens_per_batch: int = 4096, pad_token_id: int = 0) -> list[torch.Tensor]:
    """The target's last hidden state (after its final norm: what its LM head reads), or for `feature_layers`
    the fused head's features (treespec.models.eagle_head.target_features), at every position of every sequence: one
    [L_b, F] float16 tensor per sequence (right padding, batched by length)."""
    out: list[torch.Tensor | None] = [None] * len(sequences)
    for batch in length_batches([len(s) for s in sequences], tokens_per_batch):
        ids, mask = _right_padded([sequences[i] for i in batch], pad_token_id)
        forward = target.base_model(input_ids=ids, attention_mask=mask, output_hidden_states=bool(feature_layers))
        hidden = eagle_head.target_features(target, forward, feature_layers)  # [B, L, F]
        for row, i in enumerate(batch):
            out[i] = hidden[row, : len(sequences[i])].to(torch.float16)
    return out


@torch.no_grad()
def compare_precision(reference: PreTrainedModel, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], *,
                      max_new_tokens: int, eos_token_id: int | None, pad_token_id: int,
                      batch_size: int = 16) -> tuple[dict, list[list[int]]]:
    """Greedy answers made in another precision (e.g. bf16) against `reference` (fp32): the reference
    regenerates them, and teacher-forced on the given answers says at how many positions its argmax is the
    token given. Returns ({"prompts", "identical_answers", "mean_common_prefix", "answer_tokens",
    "teacher_forced_agreement"}, the reference's answers)."""
    redone: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        redone += generate_answers(reference, prompts[start:start + batch_size], temperature=0.0,
                                   max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    sequences = [torch.tensor(list(p) + list(a), dtype=torch.long) for p, a in zip(prompts, answers)]
    forced = teacher_pass(reference, sequences, [len(p) for p in prompts], keep_top=1, pad_token_id=pad_token_id)
    agree = sum(int((top[:, 0].long() == torch.tensor(list(a), dtype=torch.long)).sum()) for top, a in
                zip(forced.top_ids, answers))
    tokens = sum(len(a) for a in answers)
    prefixes = []
    for a, b in zip(answers, redone):
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefixes.append(common / max(1, max(len(a), len(b))))
    stats = {"prompts": len(prompts), "identical_answers": sum(list(a) == b for a, b in zip(answers, redone)),
             "mean_common_prefix": round(sum(prefixes) / max(1, len(prefixes)), 4), "answer_tokens": tokens,
             "teacher_forced_agreement": round(agree / max(1, tokens), 5)}
    return stats, redone
