"""Self-distillation: data records, vocabulary, loss, and a smoke run of experiments/train_draft.py."""

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import run_inprocess, tiny_model
from transformers import LlamaConfig, LlamaForCausalLM

from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.models import DEFAULT_TARGET, load_model, load_tokenizer
from treespec.training import corpus_stages, distill_data, pipeline, run_corpus, train
from treespec.training.config import TrainDraftSchema

ROOT = Path(__file__).parents[2]


def test_answer_batch_records_match_a_direct_forward():
    target = tiny_model("llama", seed=0)
    prompts = [[5, 6, 7], [9, 1]]
    records = distill_data.answer_batch(target, prompts, temperature=0.0, max_new_tokens=6, keep_top=4,
                                        eos_token_id=63, pad_token_id=0)
    for prompt, record in zip(prompts, records):
        ids = record["input_ids"].long()
        assert record["prompt_len"] == len(prompt) and ids[: len(prompt)].tolist() == prompt
        answer = ids[len(prompt):]
        assert record["top_ids"].shape == (len(answer), 4)
        with torch.no_grad():
            logprobs = torch.log_softmax(target(ids[None]).logits[0, len(prompt) - 1: -1], -1)
        assert torch.equal(record["top_ids"][:, 0].long(), answer)  # greedy: the answer is the argmax
        torch.testing.assert_close(record["top_logprobs"].float(), logprobs.topk(4).values, atol=2e-3, rtol=1e-3)


def test_answers_stop_after_eos():
    target = tiny_model("llama", seed=0)
    free = distill_data.answer_batch(target, [[5, 6, 7]], temperature=0.0, max_new_tokens=8, keep_top=2,
                                     eos_token_id=None, pad_token_id=0)[0]
    eos = int(free["input_ids"][3 + 2])
    cut = distill_data.answer_batch(target, [[5, 6, 7]], temperature=0.0, max_new_tokens=8, keep_top=2,
                                    eos_token_id=eos, pad_token_id=0)[0]
    answer = cut["input_ids"][3:].tolist()
    assert answer[-1] == eos and eos not in answer[:-1] and len(cut["top_ids"]) == len(answer)


def test_vocabulary_selection_and_modes():
    counts = Counter({5: 10, 7: 3, 9: 8, 11: 1})
    assert distill_data.select_output_vocab(counts, 3, always=[11]) == [5, 9, 11]
    modes = [distill_data.SamplingMode("greedy", 0.0, 3), distill_data.SamplingMode("t1", 1.0, 1)]
    chosen = distill_data.assign_modes(400, modes, seed=0)
    assert chosen == distill_data.assign_modes(400, modes, seed=0)
    assert 250 < sum(m.name == "greedy" for m in chosen) < 350
    batches = distill_data.batches_by_length(range(5), [5, 1, 4, 2, 3], 2)
    assert batches == [[1, 3], [4, 2], [0]]


def test_distillation_loss_learns_a_tiny_target():
    target = tiny_model("llama", seed=0, vocab=32)
    torch.manual_seed(0)
    prompts = [[random.Random(i).randrange(32) for _ in range(4)] for i in range(12)]
    records = distill_data.answer_batch(target, prompts, temperature=1.0, max_new_tokens=12, keep_top=8,
                                        eos_token_id=None, pad_token_id=0)
    shard = {k: [r[k] for r in records] for k in records[0]}
    shard["mode"] = ["t1"] * len(records)
    vocab = list(range(32))
    draft = train.init_draft_from_target(target, vocab, init_layers=[0], embed_rank=8)
    examples = train.make_examples(shard, vocab, max_len=64)
    batch = train.collate(examples, pad_id=0)
    assert batch.rows.shape[0] == batch.top_ids.shape[0] == sum(len(e.top_ids) for e in examples)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss, _, _ = train.distill_loss(draft, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    def score(chunk):
        batch = train.collate(chunk, pad_id=0)
        return train.distill_loss(draft, batch)[1], batch.top_ids

    metrics = train.agreement(score, examples)
    assert 0 <= metrics["agree_top1"] <= metrics["target_in_top4"] <= 1


def test_cosine_schedule():
    assert train.cosine_lr(0, 100, 10, 1.0, 0.0) == pytest.approx(0.1)
    assert train.cosine_lr(10, 100, 10, 1.0, 0.0) == pytest.approx(1.0)
    assert train.cosine_lr(100, 100, 10, 1.0, 0.1) == pytest.approx(0.1)


@pytest.fixture(scope="module")
def tiny_target_dir(tmp_path_factory):
    """A tiny random Llama with the default target's tokenizer (so the chat template is real)."""
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny-target")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _train_draft(run_dir, target_dir, *overrides, process=False):
    """experiments/train_draft.py on a tiny target, in this process (conftest.run_inprocess) or as its own."""
    args = [f"hydra.run.dir={run_dir}", f"target={target_dir}", "pool.size=6", "generate.max_new_tokens=6",
            "generate.batch_size=3", "generate.shard_prompts=3", "vocab.size=300", "draft.init_layers=[0]",
            "draft.embed_rank=8", "train.tokens_per_batch=512", "train.eval_every=2", "train.checkpoint_every=2",
            "train.warmup_steps=1", "threads=1", *overrides]
    if not process:
        return run_inprocess("experiments/train_draft.py", args)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(ROOT / "experiments/train_draft.py"), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=env)  # this checkout's treespec


def test_train_draft_smoke_run_and_resume(tmp_path, tiny_target_dir):
    run = tmp_path / "run"
    first = _train_draft(run, tiny_target_dir, "train.max_steps=3", process=True)  # as a process of its own
    assert first.returncode == 0, first.stderr[-3000:]
    assert len((run / "prompts.jsonl").read_text().splitlines()) == 6
    manifest = json.loads((run / "corpus" / "manifest.json").read_text())  # a path target: the corpus is the run's own
    assert [e["file"] for e in manifest["shards"]] == ["p000000-000003.npz", "p000003-000006.npz"]
    assert len(list((run / "teacher").glob("*.pt"))) == 2
    vocab = json.loads((run / "vocab.json").read_text())
    assert vocab["size"] <= 300 and 0 < vocab["answer_token_coverage"] <= 1
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3] and "agree_top1" in log[0]
    draft = load_model(run / "draft")
    assert type(draft).__name__ == "TreespecDraftForCausalLM" and draft.dtype == torch.float32
    summary = json.loads((run / "draft" / "training_summary.json").read_text())
    assert summary["train_steps"] == 3 and summary["answers"] == 6

    second = _train_draft(run, tiny_target_dir, "train.max_steps=5")  # resumes from the step-2/3 checkpoint
    assert second.returncode == 0, second.stderr[-3000:]
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4, 5]
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*.pt")) == ["step_000004.pt", "step_000005.pt"]


def test_train_draft_with_followups_and_an_unknown_stage(tmp_path, tiny_target_dir):
    run = tmp_path / "run"
    result = _train_draft(run, tiny_target_dir, "stages=[pool,generate,followups,teacher,vocab,train,export]",
                          "train.max_steps=2", "train.holdout_fraction=0.2")  # holds out pool prompt 0, both turns
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list((run / "teacher").glob("turn2.p*.pt"))) == 2
    summary = json.loads((run / "draft" / "training_summary.json").read_text())
    assert summary["answers"] == 12 and summary["followup_answers"] == 6 and summary["followups"]["shards"] == 2
    card = (run / "draft" / "README.md").read_text()
    assert "6 of them were answered" in card and "- Second turns: 6 of the answers" in card
    assert "answer tokens in all (the parts below included)" in card and "h of generation in all in" in card
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert {"pool_agree_top1", "turn2_agree_top1", "turn2_target_in_top4"} <= set(log[0]) <= set(log[-1])
    assert "By corpus part, top-1 agreement: pool " in card and ", turn2 " in card
    result = _train_draft(run, tiny_target_dir, "stages=[pool,generat]")
    assert result.returncode != 0 and "unknown stages ['generat']" in result.stderr


def test_train_eagle_head_smoke_run(tmp_path, tiny_target_dir):
    run = tmp_path / "run"
    result = _train_draft(run, tiny_target_dir, "draft.kind=eagle", "train.max_steps=3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list((run / "teacher").glob("*.top20.features.pt"))) == 2
    head = load_model(run / "draft")
    assert type(head).__name__ == "EagleDraftModel"
    card = (run / "draft" / "README.md").read_text()
    assert "EAGLE-style draft head" in card and "transformers' assisted generation cannot use it" in card
    assert "It reads the target's last hidden state" in card and "torch threads)" in card
    target = load_model(tiny_target_dir)
    import treespec

    prompt = [1, 2, 3, 4]
    expected = target.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False)[0, 4:].tolist()
    got = treespec.generate(target, head, prompt, tree=treespec.policies.KAry([2, 2]), max_new_tokens=10)
    assert got.tokens == expected[: len(got.tokens)] and len(got.tokens) == len(expected)

    # a second run starts a fused head (EAGLE-3: embeddings, layer 1 and the top) from that one and trains
    # three unrolled levels, the head reading its own features
    second = tmp_path / "second"
    second.mkdir()
    (second / "prompts.jsonl").write_bytes((run / "prompts.jsonl").read_bytes())  # vocab.json: init_from's
    (second / "teacher").symlink_to(run / "teacher")
    result = _train_draft(second, tiny_target_dir, "draft.kind=eagle", "train.max_steps=2", "draft.eagle_unroll=3",
                          "draft.eagle_feature_layers=[0,1,2]", f"draft.init_from={run / 'draft'}",
                          f"corpus.dir={run / 'corpus'}", "train.dtype=bfloat16", "draft.freeze_head=false")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list((run / "teacher").glob("*.top20.features-0-1-2.pt"))) == 2
    assert json.loads((second / "vocab.json").read_text())["ids"] == json.loads((run / "vocab.json").read_text())["ids"]
    card = (second / "draft" / "README.md").read_text()
    assert f"Started from the trained draft `{run / 'draft'}`" in card and "2 tree levels down" in card
    assert "It reads the target's hidden states after layers [0, 1, 2], fused" in card
    assert "one decoder layer (the start draft's, then trained)" in card and "tokens (the start draft's;" in card
    assert "fused target feature" in card and "loss on tokens only" in card and "d=2: " in card and "d=3: " in card
    assert "torch threads, the forward in bf16 autocast)" in card and "autocast" not in (run / "draft" / "README.md").read_text()
    assert "(frozen in training)" in (run / "draft" / "README.md").read_text() and "`draft.freeze_head=false`" in card
    assert not torch.equal(load_model(second / "draft").lm_head.weight, head.lm_head.weight)  # the LM head trained too
    assert json.loads((second / "draft" / "training_summary.json").read_text())["train_precision"] == "bfloat16"
    log = [json.loads(line) for line in (second / "train_log.jsonl").read_text().splitlines()]
    assert "greedy_agree_top1_level3" in log[0] and "agree_top1_level2" in log[-1]
    fused = load_model(second / "draft")
    assert fused.config.feature_layers == [0, 1, 2] and fused.fuse.weight.shape == (32, 96)
    got = treespec.generate(target, fused, prompt, tree=treespec.policies.KAry([2, 2]), max_new_tokens=10)
    assert got.tokens == expected[: len(got.tokens)] and len(got.tokens) == len(expected)


def test_vocab_grow_adds_the_most_frequent_tokens_a_started_head_lacks(tmp_path, tiny_target_dir):
    small = tmp_path / "small"
    result = _train_draft(small, tiny_target_dir, "draft.kind=eagle", "train.max_steps=1", "vocab.size=6")
    assert result.returncode == 0, result.stderr[-3000:]
    start_ids = json.loads((small / "vocab.json").read_text())["ids"]
    grown = tmp_path / "grown"
    grown.mkdir()
    (grown / "prompts.jsonl").write_bytes((small / "prompts.jsonl").read_bytes())
    (grown / "teacher").symlink_to(small / "teacher")
    common = ("draft.kind=eagle", "train.max_steps=1", "vocab.size=12", f"draft.init_from={small / 'draft'}",
              f"corpus.dir={small / 'corpus'}")
    # without vocab.grow: the start's own vocabulary; with draft.eagle_layers=2 a second, fresh layer below its one
    kept = _train_draft(tmp_path / "kept", tiny_target_dir, *common, "draft.eagle_layers=2")
    assert kept.returncode == 0 and json.loads((tmp_path / "kept" / "vocab.json").read_text())["ids"] == start_ids
    deep = load_model(tmp_path / "kept" / "draft")
    assert deep.config.num_hidden_layers == 2 and len(deep.more_layers) == 1
    assert "2 decoder layers (the start draft's, fresh ones below its depth, then trained)" in (
        tmp_path / "kept" / "draft" / "README.md").read_text()
    shallower = _train_draft(tmp_path / "shallower", tiny_target_dir, *common[:3],
                             f"draft.init_from={tmp_path / 'kept' / 'draft'}", common[4])
    assert shallower.returncode != 0 and "has 2 decoder layers, more than draft.eagle_layers=1" in shallower.stderr
    result = _train_draft(grown, tiny_target_dir, *common, "vocab.grow=true")
    assert result.returncode == 0, result.stderr[-3000:]
    vocab = json.loads((grown / "vocab.json").read_text())
    assert vocab["size"] == 12 and vocab["start_size"] == 6 and set(start_ids) < set(vocab["ids"])
    assert vocab["answer_token_coverage"] > json.loads((small / "vocab.json").read_text())["answer_token_coverage"]
    head = load_model(grown / "draft")
    assert head.config.output_token_ids == vocab["ids"] and head.lm_head.weight.shape[0] == 12
    assert "the start draft's 6 plus the most frequent answer tokens it lacked" in (grown / "draft" / "README.md").read_text()


def test_teacher_pass_recomputes_the_generation_time_targets():
    target = tiny_model("llama", seed=0)
    prompts = [[5, 6, 7], [9, 1], [3, 3, 3, 3, 8]]
    records = distill_data.answer_batch(target, prompts, temperature=1.0, max_new_tokens=7, keep_top=4,
                                        eos_token_id=None, pad_token_id=0)
    out = distill_data.teacher_pass(target, [r["input_ids"] for r in records], [r["prompt_len"] for r in records],
                                    keep_top=4, features=True, tokens_per_batch=16)
    features = distill_data.target_features(target, [r["input_ids"] for r in records])
    for record, ids, logprobs, feature, direct in zip(records, out.top_ids, out.top_logprobs, out.features, features):
        assert torch.equal(ids, record["top_ids"])
        torch.testing.assert_close(logprobs.float(), record["top_logprobs"].float(), atol=2e-3, rtol=1e-3)
        torch.testing.assert_close(feature, direct)


def test_generate_answers_cut_at_eos_like_answer_batch():
    target = tiny_model("llama", seed=0)
    prompts = [[5, 6, 7], [9, 1]]
    free = distill_data.generate_answers(target, prompts, temperature=0.0, max_new_tokens=8, eos_token_id=None,
                                         pad_token_id=0)
    eos = free[0][2]
    cut = distill_data.generate_answers(target, prompts, temperature=0.0, max_new_tokens=8, eos_token_id=eos, pad_token_id=0)
    records = distill_data.answer_batch(target, prompts, temperature=0.0, max_new_tokens=8, keep_top=2, eos_token_id=eos,
                                        pad_token_id=0)
    assert cut[0] == free[0][:3] and [r["input_ids"][r["prompt_len"]:].tolist() for r in records] == cut


def test_compare_precision_measures_agreement_with_the_reference():
    target = tiny_model("llama", seed=0)
    prompts = [[5, 6, 7], [9, 1], [4]]
    same = distill_data.generate_answers(target, prompts, temperature=0.0, max_new_tokens=6, eos_token_id=None,
                                         pad_token_id=0)
    stats, redone = distill_data.compare_precision(target, prompts, same, max_new_tokens=6, eos_token_id=None, pad_token_id=0)
    assert redone == same
    assert stats == {"prompts": 3, "identical_answers": 3, "mean_common_prefix": 1.0, "answer_tokens": 18,
                     "teacher_forced_agreement": 1.0}
    other = [[(t + 1) % 64 for t in a] for a in same]  # every token differs from the reference's argmax
    stats, redone = distill_data.compare_precision(target, prompts, other, max_new_tokens=6, eos_token_id=None, pad_token_id=0)
    assert redone == same and stats["identical_answers"] == 0 and stats["teacher_forced_agreement"] == 0.0


def _config(target_dir, corpus_dir, *overrides):
    """train_draft's configuration for a 9-prompt pool of the tiny target, as Hydra would compose it and
    experiments/train_draft.py hands it to the stages (a TrainDraftSchema)."""
    from omegaconf import OmegaConf

    defaults = OmegaConf.load(ROOT / "conf/train_draft.yaml")
    del defaults["defaults"], defaults["hydra"]
    return OmegaConf.to_object(OmegaConf.merge(
        OmegaConf.structured(TrainDraftSchema), defaults,
        OmegaConf.from_dotlist([f"target={target_dir}", f"corpus.dir={corpus_dir}", "pool.size=9", "generate.max_new_tokens=5",
                                "generate.batch_size=4", "generate.shard_prompts=3", *overrides])))


def _generate_in_process(run, target_dir, corpus_dir, *overrides):
    """train_draft's pool and generate stages (treespec.training.corpus_stages) in this process (a session adding
    to the corpus)."""
    cfg = _config(target_dir, corpus_dir, *overrides)
    run.mkdir(exist_ok=True)
    corpus_stages.stage_generate(cfg, run, corpus_stages.stage_pool(cfg, run))
    return json.loads((corpus_dir / "manifest.json").read_text())


def test_generation_appends_across_sessions_and_regenerates_an_interrupted_shard(tmp_path, tiny_target_dir):
    store = tmp_path / "corpus"
    first = _generate_in_process(tmp_path / "a", tiny_target_dir, store, "generate.prompts=3", "generate.dtype=float32")
    assert [e["file"] for e in first["shards"]] == ["p000000-000003.npz"]
    entry = first["shards"][0]
    assert entry["precision"] == "float32" and entry["precision_check"] is None and entry["max_new_tokens"] == 5
    assert entry["machine"]["cpu"] and entry["date"].endswith("Z") and entry["config"]["generate"]["prompts"] == 3
    assert sum(m["answers"] for m in entry["sampling"].values()) == 3

    # the next session asks for the whole pool in bf16: the first shard is kept, two are appended
    second = _generate_in_process(tmp_path / "b", tiny_target_dir, store, "generate.dtype=bfloat16", "generate.bf16_check=2")
    assert second["shards"][0] == entry
    assert [e["file"] for e in second["shards"]] == ["p000000-000003.npz", "p000003-000006.npz", "p000006-000009.npz"]
    for added in second["shards"][1:]:
        check = added["precision_check"]
        greedy = added["sampling"]["greedy"]["answers"]
        assert added["precision"] == "bfloat16"
        if greedy:
            assert check["prompts"] == min(2, greedy) and 0 <= check["teacher_forced_agreement"] <= 1
        else:
            assert check is None

    # a session dies after writing a shard file but before recording it, and a recorded shard gets damaged
    middle = store / "p000003-000006.npz"
    middle.write_bytes(middle.read_bytes()[:-3])
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["shards"] = manifest["shards"][:2]
    (store / "manifest.json").write_text(json.dumps(manifest))
    third = _generate_in_process(tmp_path / "c", tiny_target_dir, store, "generate.dtype=float32")
    assert [e["file"] for e in third["shards"]] == ["p000000-000003.npz", "p000003-000006.npz", "p000006-000009.npz"]
    assert third["shards"][0] == entry and all(e["precision"] == "float32" for e in third["shards"][1:])
    for e in third["shards"]:
        assert corpus.verify_entry(store, e) is None


def test_followups_answer_each_first_turn_and_are_redone_when_it_changes(tmp_path, tiny_target_dir):
    from treespec.eval.prompt_pool import followup

    store, run = tmp_path / "corpus", tmp_path / "run"
    first = _generate_in_process(run, tiny_target_dir, store, "generate.dtype=float32")
    cfg = _config(tiny_target_dir, store, "generate.dtype=float32", "generate.max_shards=2")
    prompts = corpus_stages.stage_pool(cfg, run)
    corpus_stages.stage_followups(cfg, run, prompts)
    second = json.loads((store / "turn2" / "manifest.json").read_text())
    assert second["pool"]["turn"] == 2 and second["modes"] == first["modes"]
    assert [e["file"] for e in second["shards"]] == ["p000000-000003.npz", "p000003-000006.npz"]
    assert all(e["first_turn"] == {"file": f["file"], "sha256": f["sha256"]} for e, f in zip(second["shards"], first["shards"]))
    tokenizer, target = load_tokenizer(tiny_target_dir), load_model(tiny_target_dir)
    greedy = [m["name"] for m in first["modes"]].index("greedy")
    checked = 0
    for entry in second["shards"]:
        one, two = corpus.read_shard(store / entry["file"]), corpus.read_shard(store / "turn2" / entry["file"])
        for key in ("pool_index", "mode", "category"):
            assert (one[key] == two[key]).all()
        for (ids1, p1), (ids2, p2), index, mode in zip(corpus.records(one), corpus.records(two), one["pool_index"], one["mode"]):
            answer = ids1[p1:-1] if ids1[-1] == tokenizer.eos_token_id else ids1[p1:]
            conversation = tokenizer.decode(ids2[:p2])
            row = prompts[int(index)]
            assert conversation.index(row["text"]) < conversation.index(tokenizer.decode(answer, skip_special_tokens=True))
            assert conversation.rstrip().endswith(followup(row["category"], int(index), 0) + "<|im_end|>\n<|im_start|>assistant")
            if mode == greedy:  # the stored follow-up answer is the target's own
                out = target.generate(torch.from_numpy(ids2[:p2])[None], max_new_tokens=5, do_sample=False,
                                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)[0, p2:]
                assert ids2[p2:].tolist() == out.tolist()[: len(ids2) - p2] and len(ids2) - p2 >= 1
                checked += 1
    assert checked >= 1

    # the first shard's follow-ups claim another first turn (as after it was regenerated): dropped and redone
    kept = (store / "turn2" / "p000000-000003.npz").read_bytes()
    second["shards"][0]["first_turn"]["sha256"] = "0" * 64
    (store / "turn2" / "manifest.json").write_text(json.dumps(second))
    corpus_stages.stage_followups(_config(tiny_target_dir, store, "generate.dtype=float32"), run, prompts)
    third = json.loads((store / "turn2" / "manifest.json").read_text())
    assert [e["file"] for e in third["shards"]] == ["p000003-000006.npz", "p000000-000003.npz", "p000006-000009.npz"]
    assert third["shards"][1]["first_turn"]["sha256"] == first["shards"][0]["sha256"]
    assert (store / "turn2" / "p000000-000003.npz").read_bytes() == kept  # same seeds, same answers

    # teacher, vocab and train read both parts; followups.train=false reads the first turns only
    pad = corpus_stages.special_ids(tokenizer)[1]
    parts = run_corpus.corpus_parts(cfg, run, tokenizer)
    assert [p.name for p in parts] == ["", "turn2"]
    pipeline.stage_teacher(cfg, run, parts, pad)
    assert len(list((run / "teacher").glob("turn2.p*.top20.pt"))) == 3 and len(list((run / "teacher").glob("p*.pt"))) == 3
    data = pipeline.load_data(cfg, run, parts)
    assert data["part"] == [""] * 9 + ["turn2"] * 9 and data["pool_index"][:9] == data["pool_index"][9:]
    assert [len(t) for t in data["top_ids"]] == [len(ids) - p for ids, p in zip(data["input_ids"], data["prompt_len"])]
    only_first = run_corpus.corpus_parts(_config(tiny_target_dir, store, "followups.train=false"), run, tokenizer)
    assert [p.name for p in only_first] == [""]


def test_self_prompts_are_screened_answered_and_read_by_training(tmp_path, tiny_target_dir, monkeypatch):
    from treespec.eval.data import encode_prompt
    from treespec.training import self_prompts

    tokenizer = load_tokenizer(tiny_target_dir)
    requests = ["How do I keep basil alive on a windowsill?", "Thanks!", "What is a good name for a small bakery?"]

    def written_by_the_target(model, prefix_ids, n, **kwargs):  # a random tiny model never closes its user turn
        assert tokenizer.decode(prefix_ids) == self_prompts.query_prefix(tokenizer) and n == 3
        return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in requests], [True] * 3

    monkeypatch.setattr(self_prompts, "generate_queries", written_by_the_target)
    store, run = tmp_path / "corpus", tmp_path / "run"
    _generate_in_process(run, tiny_target_dir, store, "generate.dtype=float32", "generate.prompts=3")
    cfg = _config(tiny_target_dir, store, "generate.dtype=float32", "self_prompts.count=6")
    corpus_stages.stage_self_prompts(cfg, run)
    manifest = json.loads((store / "self" / "manifest.json").read_text())
    assert [e["file"] for e in manifest["shards"]] == ["p000000-000003.npz", "p000003-000006.npz"]
    assert manifest["pool"]["temperature"] == 1.0 and "MT-Bench" in manifest["pool"]["screen"]
    weights = [m["weight"] for m in manifest["modes"]]
    for entry in manifest["shards"]:
        start = entry["prompts"]["start"]
        assert entry["requests"] == {"written": 3, "kept": 2, "rejected": {"short": 1}} and entry["answers"] == 2
        arrays = corpus.read_shard(store / "self" / entry["file"])
        assert arrays["pool_index"].tolist() == [start, start + 2] and arrays["category"].tolist() == [0, 0]
        for (ids, plen), index, mode in zip(corpus.records(arrays), arrays["pool_index"], arrays["mode"]):
            assert ids[:plen].tolist() == encode_prompt(tokenizer, requests[int(index) - start])
            assert mode == self_prompts.mode_for(int(index), weights, 0) and len(ids) > plen
    corpus_stages.stage_self_prompts(cfg, run)  # all 6 requests written: nothing to add
    assert json.loads((store / "self" / "manifest.json").read_text()) == manifest

    pad = corpus_stages.special_ids(tokenizer)[1]
    parts = run_corpus.corpus_parts(cfg, run, tokenizer)
    assert [p.name for p in parts] == ["", "self"]
    pipeline.stage_teacher(cfg, run, parts, pad)
    data = pipeline.load_data(cfg, run, parts)
    assert data["part"] == [""] * 3 + ["self"] * 4 and data["category"][3:] == ["self"] * 4
    assert [len(t) for t in data["top_ids"]] == [len(ids) - p for ids, p in zip(data["input_ids"], data["prompt_len"])]
    assert [p.name for p in run_corpus.corpus_parts(_config(tiny_target_dir, store, "self_prompts.train=false"), run,
                                                    tokenizer)] == [""]


def test_a_bf16_teacher_pass_has_a_cache_of_its_own(tmp_path, tiny_target_dir):
    store, run = tmp_path / "corpus", tmp_path / "run"
    _generate_in_process(run, tiny_target_dir, store, "generate.dtype=float32", "generate.prompts=3")
    tokenizer = load_tokenizer(tiny_target_dir)
    pad = corpus_stages.special_ids(tokenizer)[1]
    fp32, bf16 = (_config(tiny_target_dir, store, "draft.kind=eagle", f"teacher.dtype={d}") for d in ("float32", "bfloat16"))
    parts = run_corpus.corpus_parts(bf16, run, tokenizer)
    pipeline.stage_teacher(bf16, run, parts, pad)
    assert [p.name for p in (run / "teacher").iterdir()] == ["p000000-000003." + parts[0].manifest["shards"][0]["sha256"][:16]
                                                             + ".top20.features.bf16.pt"]
    with pytest.raises(ConfigError, match="missing: run the teacher stage"):
        pipeline.load_data(fp32, run, parts)  # an fp32 run never reads the bf16 cache
    rounded = pipeline.load_data(bf16, run, parts)
    pipeline.stage_teacher(fp32, run, parts, pad)
    exact = pipeline.load_data(fp32, run, parts)
    assert len(list((run / "teacher").iterdir())) == 2
    for low, high in zip(rounded["features"], exact["features"]):  # the same features, to bf16's 8 bits of mantissa
        assert low.shape == high.shape and torch.allclose(low.float(), high.float(), rtol=0.05, atol=0.05)
    for low, high in zip(rounded["top_logprobs"], exact["top_logprobs"]):
        assert (low.float() - high.float()).abs().max() < 0.1
    with pytest.raises(ConfigError, match="teacher.dtype must be auto, float32 or bfloat16, got 'float16'"):
        pipeline.stage_teacher(_config(tiny_target_dir, store, "teacher.dtype=float16"), run, parts, pad)


def test_no_shard_starts_after_max_hours(caplog):
    import logging

    shards = [(0, 3), (3, 6)]
    assert list(corpus_stages.within_hours(shards, None, "prompts {0}..{1}")) == shards
    assert list(corpus_stages.within_hours(shards, 1.0, "prompts {0}..{1}")) == shards
    with caplog.at_level(logging.INFO, logger="train_draft"):
        assert list(corpus_stages.within_hours(shards, 0.0, "prompts {0}..{1}")) == []
        assert list(corpus_stages.within_hours([{"file": "p.npz"}], 0.0, "the follow-ups of {0[file]}")) == []
    assert "stopping before prompts 0..3" in caplog.text and "stopping before the follow-ups of p.npz" in caplog.text
