"""Prompts the target writes itself (Magpie, Xu et al. 2024), for self-distillation beyond the template pool.

Given only its chat template up to the start of a user turn, an instruction-tuned model continues with a
plausible user request: the requests its own tuning data made likely, in the users' own phrasing, far more
varied than any template pool. Answering them gives training data from the target's notion of what users ask.
Requests are screened before they are answered: finished (the model closed the turn), at least `min_words`
words, no 8-word run shared with MT-Bench or HumanEval (`prompt_pool.ngram_overlaps`, as the pool is checked),
and no repeat of an earlier request of the same batch.

    query_prefix(tokenizer) -> str                 the chat template's text before a user turn's content
    generate_queries(model, prefix_ids, n, ...)    n sampled user turns (token ids, cut at EOS) and whether each ended
    screen_queries(texts, ended, references)       why each request is rejected (None: kept)
    mode_for(index, weights, seed)                 the sampling mode of request `index` (seeded per index)
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from treespec.errors import ConfigError
from treespec.eval.prompt_pool import ngram_overlaps

SENTINEL = "\x00treespec-user-turn\x00"
MIN_WORDS = 4


def query_prefix(tokenizer: PreTrainedTokenizerBase) -> str:
    """The chat template's text before the content of a first user turn (system prompt included)."""
    if not tokenizer.chat_template:
        raise ConfigError("self prompts need a tokenizer with a chat template")
    text = tokenizer.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
    if text.count(SENTINEL) != 1:
        raise ConfigError("the chat template does not place a user turn's content verbatim")
    return text.partition(SENTINEL)[0]


@torch.no_grad()
def generate_queries(model: PreTrainedModel, prefix_ids: Sequence[int], n: int, *, temperature: float,
                     max_tokens: int, eos_token_id: int, pad_token_id: int, batch_size: int,
                     seed: int) -> tuple[list[list[int]], list[bool]]:
    """n user turns sampled after `prefix_ids` (at `temperature`, full distribution), in batches; returns each
    turn's ids without its EOS and whether it ended (EOS within `max_tokens`)."""
    torch.manual_seed(seed)
    prefix = torch.tensor([list(prefix_ids)])
    queries, ended = [], []
    for first in range(0, n, batch_size):
        rows = min(batch_size, n - first)
        out = model.generate(input_ids=prefix.expand(rows, -1),
                             attention_mask=torch.ones(rows, prefix.shape[1], dtype=torch.long), do_sample=True,
                             temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_tokens,
                             eos_token_id=eos_token_id, pad_token_id=pad_token_id)
        for row in out[:, prefix.shape[1]:].tolist():
            done = eos_token_id in row
            queries.append(row[: row.index(eos_token_id)] if done else row)
            ended.append(done)
    return queries, ended


def _normalised(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def screen_queries(texts: Sequence[str], ended: Sequence[bool], references: Sequence[str], *,
                   min_words: int = MIN_WORDS) -> list[str | None]:
    """Why each request is rejected: "unfinished", "short", "overlap" (an 8-word run of a reference) or
    "duplicate" (of an earlier one here); None when it is kept."""
    overlapping = set(ngram_overlaps(list(texts), list(references), n=8))
    seen: set[str] = set()
    reasons: list[str | None] = []
    for i, (text, done) in enumerate(zip(texts, ended)):
        key = _normalised(text)
        if not done:
            reasons.append("unfinished")
        elif len(key.split()) < min_words:
            reasons.append("short")
        elif i in overlapping:
            reasons.append("overlap")
        elif key in seen:
            reasons.append("duplicate")
        else:
            reasons.append(None)
            seen.add(key)
    return reasons


def mode_for(index: int, weights: Sequence[float], seed: int) -> int:
    """The sampling mode (an index into `weights`) of request `index`: a weighted choice seeded by (seed, index)."""
    return random.Random(f"self-prompt-mode:{seed}:{index}").choices(range(len(weights)), weights=weights)[0]
