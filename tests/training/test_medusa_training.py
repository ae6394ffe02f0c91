"""Training Medusa heads (treespec.training.medusa) end to end on a tiny target and a tiny synthetic corpus: teacher
pass, training, export with its summary and model card, reload, lossless decoding with the result."""

import json

import pytest
import torch
from conftest import tiny_model
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import treespec
from treespec import policies
from treespec.app import cli
from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.models import load_model
from treespec.models.medusa_head import MedusaHeads
from treespec.training.medusa import (
    MedusaDataSpec,
    MedusaExportSpec,
    MedusaOptimSpec,
    MedusaTeacherSpec,
    TrainMedusaSchema,
    run,
    split_shards,
)

ENTRY = {"sampling": {"greedy": {"temperature": 0.0, "answers": 4}}, "max_new_tokens": 24, "precision": "float32",
         "command": "test", "config": {}, "machine": {"cpu": "test"}, "date": "2026-01-01T00:00:00Z", "seconds": 0.0}


def synthetic_corpus(target, directory, shards=3, per_shard=4):
    """A corpus of the target's own greedy answers to random prompts, `shards` shards of `per_shard` answers."""
    directory.mkdir()
    manifest = corpus.new_manifest({"target": "tiny", "target_files": {"name": "tiny"}, "vocab_size": 64,
                                    "id_dtype": "uint16", "pool": {"size": shards * per_shard, "seed": 0},
                                    "modes": [{"name": "greedy", "temperature": 0.0, "weight": 1.0}]})
    generator = torch.Generator().manual_seed(0)
    for shard in range(shards):
        records = []
        for i in range(shard * per_shard, (shard + 1) * per_shard):
            prompt = torch.randint(0, 64, (4 + i % 3,), generator=generator).tolist()
            answer = treespec.autoregressive(target, prompt, max_new_tokens=24).tokens
            records.append(corpus.Record(i, 0, 0, prompt, answer))
        entry = corpus.write_shard(directory, shard * per_shard, (shard + 1) * per_shard, records, "uint16")
        manifest["shards"].append({**entry, **ENTRY})
    corpus.write_manifest(directory, manifest)
    return manifest


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("medusa")
    target = tiny_model("llama", seed=0, layers=2)
    target.save_pretrained(root / "target")
    synthetic_corpus(target, root / "corpus")
    cfg = TrainMedusaSchema(target=str(root / "target"), num_heads=2, threads=0,
                            data=MedusaDataSpec(dir=str(root / "corpus"), shards=2, heldout_shards=1),
                            teacher=MedusaTeacherSpec(keep_top=5, dtype="float32"),
                            train=MedusaOptimSpec(positions_per_batch=64, max_steps=40, dtype="float32", lr=1e-2,
                                                  warmup_steps=2, eval_every=20),
                            export=MedusaExportSpec(dir=str(root / "heads"), dtype="float32", proposal_vocab=24))
    (root / "run").mkdir()
    return target, run(cfg, root / "run"), root


def test_training_exports_heads_that_reload_and_decode_losslessly(trained):
    target, out, _ = trained
    for name in ("config.json", "model.safetensors", "training_summary.json", "README.md"):
        assert (out / name).is_file()
    heads = load_model(out)
    assert isinstance(heads, MedusaHeads) and heads.config.num_heads == 2
    prompt = [3, 17, 5, 9]
    expected = treespec.autoregressive(target, prompt, max_new_tokens=20).tokens
    got = treespec.generate(target, heads, prompt, tree=policies.Dynamic(budget=6, depth=3, topk=2), max_new_tokens=20)
    assert got.tokens == expected and got.mean_accepted > 1.0
    assert 24 <= heads.vocab.numel() <= 27 and heads.config.proposal_vocab == heads.vocab.numel()  # + special ids
    assert sum(t in set(heads.vocab.tolist()) for t in expected) > len(expected) / 2  # frequent tokens are kept


def test_summary_and_card_report_per_head_agreement(trained):
    _, out, root = trained
    summary = json.loads((out / "training_summary.json").read_text())
    final, start = summary["final_heldout"], summary["heldout_at_start"]
    assert set(final) == {"head1_agree_top1", "head1_top3", "head2_agree_top1", "head2_top3"}
    assert final["head1_agree_top1"] > start["head1_agree_top1"]  # it learnt the target's greedy continuations
    assert summary["train_shards"] == ["p000000-000004.npz", "p000004-000008.npz"]
    assert summary["heldout_shards"] == ["p000008-000012.npz"] and summary["train_steps"] == 40
    card = (out / "README.md").read_text()
    assert "| 1 |" in card and "| 2 |" in card and summary["machine"]["cpu"] in card
    assert "python experiments/train_medusa.py" in card
    coverage = summary["proposal_vocab"]["heldout_coverage"]
    assert 0.3 < coverage <= 1.0 and f"{100 * coverage:.1f}% of the held-out answer tokens" in card
    assert len(list((root / "run" / "teacher" / "float32").glob("*.pt"))) == 3  # cached teacher passes
    assert len((root / "run" / "train_log.jsonl").read_text().splitlines()) == 41


def test_shards_must_leave_a_heldout_one():
    manifest = {"shards": [{"file": f"s{i}", "prompts": {"start": i}} for i in range(3)]}
    train, held = split_shards(manifest, 2, 1)
    assert [e["file"] for e in train] == ["s0", "s1"] and [e["file"] for e in held] == ["s2"]
    with pytest.raises(ConfigError, match="need 4 of the corpus's 3 shards"):
        split_shards(manifest, 3, 1)


def test_config_file_matches_the_schema():
    cli.register({"train_medusa_schema": TrainMedusaSchema})
    with initialize_config_dir(config_dir=str(cli.CONF_DIR), version_base=None):
        cfg = OmegaConf.to_object(compose("train_medusa", overrides=["data.shards=3"]))
    assert cfg == TrainMedusaSchema(data=MedusaDataSpec(shards=3))
