"""Self prompts (Magpie): the user-turn prefix, sampling requests, screening them, per-request modes."""

from collections import Counter

import pytest
from conftest import tiny_model
from transformers import PreTrainedTokenizerFast

from treespec.errors import ConfigError
from treespec.models import DEFAULT_TARGET, load_tokenizer
from treespec.training import self_prompts


def test_query_prefix_is_the_template_up_to_the_user_content():
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    prefix = self_prompts.query_prefix(tokenizer)
    assert prefix.endswith("<|im_start|>user\n") and prefix.startswith("<|im_start|>system\n")
    full = tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}], tokenize=False)
    assert full.startswith(prefix + "Hello there")
    plain = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    with pytest.raises(ConfigError, match="chat template"):
        self_prompts.query_prefix(plain)


def test_generated_queries_are_cut_at_eos_and_seeded():
    model = tiny_model(vocab=64, sharpness=1.0)
    kwargs = dict(temperature=1.0, max_tokens=12, eos_token_id=5, pad_token_id=0, batch_size=4)
    queries, ended = self_prompts.generate_queries(model, [1, 2, 3], 10, seed=7, **kwargs)
    assert len(queries) == len(ended) == 10
    assert all(5 not in q for q in queries)
    assert all(len(q) == 12 for q, done in zip(queries, ended) if not done)
    assert 0 < sum(ended) < 10  # nearly uniform over 64 tokens: some rows meet EOS within 12 tokens, some not
    assert self_prompts.generate_queries(model, [1, 2, 3], 10, seed=7, **kwargs) == (queries, ended)
    assert self_prompts.generate_queries(model, [1, 2, 3], 10, seed=8, **kwargs)[0] != queries


def test_screen_names_why_each_request_is_rejected():
    references = ["Compose an engaging travel blog post about a recent trip to the mountains of Peru"]
    texts = ["How do I keep basil alive on a windowsill?", "Thanks!", "how do I keep basil alive on a windowsill",
             "Please compose an engaging travel blog post about a recent trip to the coast.",
             "What is a good name for a small bakery?", "Explain how tides work in simple words."]
    ended = [True, True, True, True, True, False]
    assert self_prompts.screen_queries(texts, ended, references) == [None, "short", "duplicate", "overlap", None,
                                                                     "unfinished"]
    # a rejected request does not make a later equal one a duplicate
    assert self_prompts.screen_queries(["Explain how tides work today", "Explain how tides work today"], [False, True],
                                       []) == ["unfinished", None]


def test_modes_are_seeded_per_request_and_follow_the_weights():
    weights = [0.6, 0.3, 0.1]
    picks = [self_prompts.mode_for(i, weights, seed=0) for i in range(3000)]
    assert picks == [self_prompts.mode_for(i, weights, seed=0) for i in range(3000)]
    assert picks != [self_prompts.mode_for(i, weights, seed=1) for i in range(3000)]
    counts = Counter(picks)
    assert abs(counts[0] / 3000 - 0.6) < 0.04 and abs(counts[2] / 3000 - 0.1) < 0.03
