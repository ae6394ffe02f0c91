"""treespec.vocab: a draft vocabulary ranked on the committed self-distillation corpus, re-encoded with the
pair's tokenizer; model.draft_vocab in the experiment entry points."""

import pytest
import torch

from treespec.app.configs import LoadedPair, with_draft_vocab
from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.eval.draft_vocab import DEFAULT_CORPUS, corpus_texts, corpus_token_counts, draft_vocabulary
from treespec.models import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2-135m-instruct")


def test_corpus_texts_are_every_record_decoded():
    manifest = corpus.read_manifest(DEFAULT_CORPUS)
    assert len(corpus_texts()) == sum(entry["answers"] for entry in manifest["shards"])
    assert all(isinstance(text, str) and text for text in corpus_texts()[:50])


def test_counts_rank_the_corpus_tokens(tokenizer):
    vocab_size = len(tokenizer)
    counts = corpus_token_counts(tokenizer, vocab_size)
    encoded = tokenizer(list(corpus_texts()[:20]), add_special_tokens=False)["input_ids"]
    assert counts.shape == (vocab_size,) and int(counts.sum()) > sum(map(len, encoded))
    for ids in encoded:  # every token of a corpus text was counted
        assert bool((counts[torch.tensor(ids)] > 0).all())
    subset = draft_vocabulary(tokenizer, vocab_size, 2000)
    the = tokenizer(" the", add_special_tokens=False)["input_ids"]
    assert len(the) == 1 and the[0] in subset.tolist()  # the commonest English word is in any sensible top 2000
    assert tokenizer.eos_token_id in subset.tolist() and set(tokenizer.all_special_ids) <= set(subset.tolist())
    assert subset.numel() <= 2000 + len(tokenizer.all_special_ids) and bool((subset[1:] > subset[:-1]).all())
    top = torch.sort(counts.double(), descending=True, stable=True).indices[:2000]
    assert set(top.tolist()) <= set(subset.tolist())


def test_with_draft_vocab_needs_a_draft_and_a_tokenizer(tokenizer):
    from conftest import tiny_model

    target = tiny_model("llama", seed=0)
    assert with_draft_vocab(LoadedPair(target, None, tokenizer), None).draft_vocab is None  # None: as is
    with pytest.raises(ConfigError, match="needs a draft model"):
        with_draft_vocab(LoadedPair(target, None, tokenizer), 100)
    with pytest.raises(ConfigError, match="needs a draft model"):
        with_draft_vocab(LoadedPair(target, tiny_model("llama", seed=1), None), 100)
    draft = tiny_model("llama", seed=1, vocab=len(tokenizer))
    pair = with_draft_vocab(LoadedPair(target, draft, tokenizer), 10)
    assert pair.draft_vocab is not None and 10 <= pair.draft_vocab.numel() <= 10 + len(tokenizer.all_special_ids)
    assert torch.equal(pair.draft_vocab, draft_vocabulary(tokenizer, len(tokenizer), 10))
