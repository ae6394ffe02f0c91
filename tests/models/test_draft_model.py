"""The reduced-vocabulary draft architecture: loading, logits, generation, assisted generation, init."""

import pytest
import torch
from conftest import tiny_model
from transformers import AutoModelForCausalLM

import treespec
from treespec.models.draft_lm import TreespecDraftConfig, TreespecDraftForCausalLM
from treespec.training.train import init_draft_from_target


def small_draft(output_ids, vocab=64, seed=0):
    torch.manual_seed(seed)
    config = TreespecDraftConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2, embed_rank=8,
                                 output_token_ids=list(output_ids), tie_word_embeddings=False,
                                 max_position_embeddings=256)
    return TreespecDraftForCausalLM(config).eval()


def test_logits_are_minus_infinity_outside_the_output_vocabulary(tmp_path):
    draft = small_draft(range(0, 64, 2))
    logits = draft(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 64)
    assert torch.isinf(logits[..., 1::2]).all() and torch.isfinite(logits[..., ::2]).all()
    draft.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, TreespecDraftForCausalLM)
    torch.testing.assert_close(loaded(torch.tensor([[1, 2, 3]])).logits, logits)


def test_rejects_an_empty_output_vocabulary():
    with pytest.raises(ValueError, match="output_token_ids"):
        small_draft([])


def test_engine_and_assisted_generation_with_the_draft():
    target = tiny_model("llama", seed=0)
    draft = small_draft(range(0, 64, 1), seed=3)
    prompt = torch.tensor([[5, 6, 7]])
    expected = target.generate(prompt, max_new_tokens=16, do_sample=False)[0, 3:].tolist()
    got = treespec.generate(target, draft, prompt[0], tree=treespec.policies.KAry([2, 2]), max_new_tokens=16)
    assert got.tokens == expected
    assisted = target.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=draft)
    assert assisted[0, 3:].tolist() == expected


def test_init_from_target_reproduces_a_truncated_target():
    target = tiny_model("llama", seed=0, layers=3)
    vocab = list(range(64))
    draft = init_draft_from_target(target, vocab, init_layers=[0, 1, 2], embed_rank=32).eval()
    ids = torch.tensor([[3, 9, 27, 17]])
    # full rank, all layers, full vocabulary: the draft is the target
    torch.testing.assert_close(draft(ids).logits, target(ids).logits, atol=1e-3, rtol=1e-3)
    smaller = init_draft_from_target(target, vocab[:20], init_layers=[0], embed_rank=4)
    assert smaller.config.num_hidden_layers == 1 and smaller.lm_head.weight.shape == (20, 32)
    torch.testing.assert_close(smaller.lm_head.weight, target.lm_head.weight[:20])
