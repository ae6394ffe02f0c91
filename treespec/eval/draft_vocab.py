"""A pair's draft vocabulary, ranked on the committed corpus: the token ids a causal-LM draft may propose from.

A draft whose LM head is a large share of its cost (Qwen2.5-Coder-0.5B: 136M of 494M parameters over 151,936
tokens) gets cheaper levels by scoring only the most frequent tokens (`treespec.drafters.CausalLMDrafter` with a
`vocab`; q renormalised over the subset, so every verification rule stays lossless).

The ranking is counted on text no evaluation set contains: the committed self-distillation corpus
(`corpus/<target>/`: pool prompts and the default target's answers), decoded with the tokenizer that wrote it
and re-encoded with the pair's tokenizer, so any pair can rank its vocabulary without generating with its own
target. The tokenizer's special tokens (EOS, chat markers) are always kept.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from treespec.drafters.vocab import token_counts, vocab_subset
from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.models.loading import load_tokenizer

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = REPO / "corpus" / "smollm2-135m-instruct"


@functools.lru_cache(maxsize=4)
def corpus_texts(directory: str = str(DEFAULT_CORPUS)) -> tuple[str, ...]:
    """Every record of a corpus (prompt then answer) as text, decoded with the tokenizer of its target."""
    path = Path(directory)
    manifest = corpus.read_manifest(path)
    if manifest is None:
        raise ConfigError(f"no corpus manifest in {path}: a draft vocabulary is counted on a self-distillation corpus")
    tokenizer = load_tokenizer(manifest["target"])
    if tokenizer is None:
        raise ConfigError(f"the corpus target '{manifest['target']}' has no tokenizer to decode its records")
    texts = []
    for entry in sorted(manifest["shards"], key=lambda e: e["prompts"]["start"]):
        for ids, _ in corpus.records(corpus.read_shard(path / entry["file"])):
            texts.append(tokenizer.decode(ids.tolist(), skip_special_tokens=True))
    return tuple(texts)


def corpus_token_counts(tokenizer, vocab_size: int, directory: str | Path = DEFAULT_CORPUS) -> torch.Tensor:
    """How often each of `tokenizer`'s ids occurs in the corpus text re-encoded with it: [vocab_size] long."""
    encoded = tokenizer(list(corpus_texts(str(directory))), add_special_tokens=False)["input_ids"]
    return token_counts(encoded, vocab_size)


def draft_vocabulary(tokenizer, vocab_size: int, size: int, directory: str | Path = DEFAULT_CORPUS) -> torch.Tensor:
    """The `size` most frequent ids of the corpus under `tokenizer`, plus its special tokens: [S] long, sorted."""
    special = [t for t in tokenizer.all_special_ids if 0 <= t < vocab_size]
    eos = tokenizer.eos_token_id
    return vocab_subset(corpus_token_counts(tokenizer, vocab_size, directory), size,
                        always=special + ([eos] if eos is not None and eos < vocab_size else []))
