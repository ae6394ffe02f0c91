"""A draft's self-distillation after its corpus (experiments/train_draft.py drives it): the target's soft targets
(and features) by teacher forcing, the output vocabulary, the training with held-out agreement, the export; and
`run_stages`, which runs the stages asked for in order, each skipping what is already on disk."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm

from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.eval.corpus import FOLLOWUPS, SELF
from treespec.models import load_model, load_tokenizer
from treespec.models.eagle_head import init_eagle_from_target
from treespec.training import distill_data, memory, train
from treespec.training.config import TrainDraftSchema
from treespec.training.corpus_stages import (
    resolve_precision,
    special_ids,
    stage_followups,
    stage_generate,
    stage_pool,
    stage_self_prompts,
)
from treespec.training.model_card import model_card
from treespec.training.run_corpus import CorpusPart, corpus_parts, part_summary

log = logging.getLogger("train_draft")  # the name train_draft's log lines have always carried


def teacher_precision(cfg: TrainDraftSchema) -> str:
    """teacher.dtype resolved on this machine: float32 or bfloat16."""
    return resolve_precision(cfg.teacher.dtype, "teacher.dtype")


def train_precision(cfg: TrainDraftSchema) -> str:
    """train.dtype resolved on this machine: float32, or bfloat16 for the training forward under autocast (weights,
    optimizer, losses' softmax and held-out evaluation stay float32)."""
    return resolve_precision(cfg.train.dtype, "train.dtype")


def teacher_file(run: Path, entry: dict, keep_top: int, features: bool, layers: tuple[int, ...] = (),
                 part: str = "", precision: str = "float32") -> Path:
    """The run's cache of one shard's teacher pass, named by the corpus part, the shard's hash and what was computed
    (in which precision: fp32 caches keep the names they had before teacher.dtype existed)."""
    suffix = f"top{keep_top}" + (".features" if features else "")
    if features and layers:  # a fused head's features
        suffix += "-" + "-".join(map(str, layers))
    if precision != "float32":
        suffix += ".bf16"
    prefix = f"{part}." if part else ""
    return run / "teacher" / f"{prefix}{Path(entry['file']).stem}.{entry['sha256'][:16]}.{suffix}.pt"


def stage_teacher(cfg: TrainDraftSchema, run: Path, parts: list[CorpusPart], pad: int) -> None:
    """Soft targets (and, for an EAGLE draft, features) of every corpus shard, by teacher forcing."""
    features, layers = cfg.draft.kind == "eagle", tuple(cfg.draft.eagle_feature_layers)
    precision = teacher_precision(cfg)
    (run / "teacher").mkdir(exist_ok=True)
    todo = [(part, e) for part in parts for e in part.manifest["shards"]
            if not teacher_file(run, e, cfg.teacher.keep_top, features, layers, part.name, precision).exists()]
    if not todo:
        return
    target = load_model(cfg.target).to(getattr(torch, precision))
    log.info("teacher forcing %d shards with the target in %s", len(todo), precision)
    for part, entry in tqdm(todo, desc="teacher", unit="shard"):
        pairs = corpus.records(corpus.read_shard(part.directory / entry["file"]))
        out = distill_data.teacher_pass(target, [torch.from_numpy(ids) for ids, _ in pairs], [p for _, p in pairs],
                                        keep_top=cfg.teacher.keep_top, features=features, feature_layers=layers,
                                        tokens_per_batch=cfg.teacher.tokens_per_batch, pad_token_id=pad)
        path = teacher_file(run, entry, cfg.teacher.keep_top, features, layers, part.name, precision)
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save({"top_ids": out.top_ids, "top_logprobs": out.top_logprobs, "features": out.features}, tmp)
        tmp.rename(path)


def load_data(cfg: TrainDraftSchema, run: Path, parts: list[CorpusPart]) -> dict:
    """The corpus's records with their soft targets (and features for an EAGLE draft), part after part, each in
    index order; `part` holds each record's part name."""
    if not parts[0].manifest["shards"]:
        raise FileNotFoundError(f"the corpus {parts[0].directory} has no shards: run the generate stage first")
    features, precision = cfg.draft.kind == "eagle", teacher_precision(cfg)
    data: dict[str, list] = {"part": [], "top_ids": [], "top_logprobs": [], **({"features": []} if features else {})}
    for part in parts:
        loaded = corpus.load(part.directory, part.manifest, [m["name"] for m in part.manifest["modes"]], part.categories)
        for key, values in loaded.items():
            data.setdefault(key, []).extend(values)
        data["part"] += [part.name] * len(loaded["input_ids"])
        for entry in sorted(part.manifest["shards"], key=lambda e: e["prompts"]["start"]):
            path = teacher_file(run, entry, cfg.teacher.keep_top, features, tuple(cfg.draft.eagle_feature_layers),
                                part.name, precision)
            if not path.exists():
                raise ConfigError(f"{path.name} is missing: run the teacher stage")
            cached = torch.load(path, mmap=True)  # features stay on disk (page cache): the corpus can outgrow RAM
            data["top_ids"] += cached["top_ids"]
            data["top_logprobs"] += cached["top_logprobs"]
            if features:
                data["features"] += cached["features"]
    return data


def stage_vocab(cfg: TrainDraftSchema, run: Path, data: dict, eos: int) -> list[int]:
    """The draft's output vocabulary (run/vocab.json): the `vocab.size` most frequent answer tokens plus EOS, or,
    when the draft starts from a trained one (`draft.init_from`), that draft's own vocabulary, grown with the most
    frequent answer tokens it lacks up to `vocab.size` when `vocab.grow` is set."""
    path = run / "vocab.json"
    if not path.exists():
        counts = distill_data.token_frequencies(data)
        info = {}
        if cfg.draft.init_from:
            ids = [int(i) for i in load_model(cfg.draft.init_from).config.output_token_ids]
            log.info("output vocabulary of draft.init_from=%s: %d tokens", cfg.draft.init_from, len(ids))
            if cfg.vocab.grow:
                if cfg.draft.kind != "eagle":
                    raise ConfigError("vocab.grow needs draft.kind=eagle (a plain draft's vocabulary is its embedding)")
                grown = distill_data.select_output_vocab(counts, cfg.vocab.size, always=ids)
                if len(grown) > len(ids):  # vocab.size above the start's size, and answer tokens it lacks
                    info["start_size"], ids = len(ids), grown
                    log.info("grown to %d tokens with the most frequent answer tokens it lacked", len(ids))
        else:
            ids = distill_data.select_output_vocab(counts, cfg.vocab.size, always=[eos])
        covered = sum(counts[i] for i in ids) / max(1, sum(counts.values()))
        path.write_text(json.dumps({"size": len(ids), "answer_token_coverage": covered, **info, "ids": ids}))
    return json.loads(path.read_text())["ids"]


@dataclass
class Trainee:
    """The model being trained and how a chunk of examples becomes (loss, reduced logits, target top ids);
    `score`, when set, gives the held-out evaluation (reduced logits per unrolled EAGLE level, target top ids)."""

    model: torch.nn.Module
    forward: Callable[[list], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    score: Optional[Callable[[list], tuple[list[torch.Tensor], torch.Tensor]]] = None


def make_trainee(cfg: TrainDraftSchema, run: Path, data: dict, vocab: list[int], pad: int) -> Trainee:
    target = load_model(cfg.target)
    if cfg.draft.kind == "plain":
        draft = train.init_draft_from_target(target, vocab, init_layers=list(cfg.draft.init_layers),
                                             embed_rank=cfg.draft.embed_rank)

        def forward(chunk):
            batch = train.collate(chunk, pad)
            loss, logits, _ = train.distill_loss(draft, batch)
            return loss, logits, batch.top_ids

        return Trainee(draft, forward)
    if cfg.draft.kind != "eagle":
        raise ConfigError(f"draft.kind must be plain or eagle, got '{cfg.draft.kind}'")
    features = data["features"]
    head = init_eagle_from_target(target, vocab, init_layer=cfg.draft.eagle_init_layer,
                                  feature_layers=list(cfg.draft.eagle_feature_layers), layers=cfg.draft.eagle_layers)
    if cfg.draft.init_from:
        start = load_model(cfg.draft.init_from)
        start_ids = [int(t) for t in start.config.output_token_ids]
        if start_ids != list(vocab) and not (cfg.vocab.grow and set(start_ids) <= set(vocab)):
            raise ConfigError(f"draft.init_from={cfg.draft.init_from} has another output vocabulary than this run"
                              + ("" if cfg.vocab.grow else " (vocab.grow=true grows it; the run's vocab.json fixes it)"))
        if start.config.feature_layers not in ([], head.config.feature_layers):
            raise ConfigError(f"draft.init_from={cfg.draft.init_from} fuses target layers {start.config.feature_layers}, "
                              f"this run {head.config.feature_layers}")
        if start.config.num_hidden_layers > head.config.num_hidden_layers:
            raise ConfigError(f"draft.init_from={cfg.draft.init_from} has {start.config.num_hidden_layers} decoder layers, "
                              f"more than draft.eagle_layers={cfg.draft.eagle_layers}")
        train.load_eagle_start(head, start)  # a single-layer head may start a fused one, a shallower one a deeper one
    head.lm_head.weight.requires_grad_(not cfg.draft.freeze_head)
    embed = target.get_input_embeddings().requires_grad_(False)
    noise = torch.Generator().manual_seed(cfg.seed)

    def forward(chunk):
        batch = train.collate_eagle(chunk, [features[e.index] for e in chunk], pad)
        loss, logits, _ = train.eagle_loss(head, embed, batch, feature_weight=cfg.draft.feature_weight,
                                           feature_noise=cfg.draft.feature_noise if head.training else 0.0,
                                           generator=noise, unroll=cfg.draft.eagle_unroll)
        return loss, logits, batch.top_ids

    def score(chunk):  # held-out agreement at every trained level (a node d-1 levels below the root)
        batch = train.collate_eagle(chunk, [features[e.index] for e in chunk], pad)
        return train.eagle_level_logits(head, embed, batch, cfg.draft.eagle_unroll), batch.top_ids

    return Trainee(head, forward, score if cfg.draft.eagle_unroll > 1 else None)


def evaluate(trainee: Trainee, held_set: list, parts: Optional[list[str]] = None) -> dict[str, float]:
    """Held-out agreement; with `parts` (each example's corpus part, by example.index) from more than one part,
    also each part's own, prefixed "<part>_" ("pool_" for the template pool's first turns)."""
    score = trainee.score or (lambda chunk: trainee.forward(chunk)[1:])
    trainee.model.eval()
    metrics = train.agreement(score, held_set)
    names = sorted({parts[e.index] for e in held_set}) if parts else []
    for name in names if len(names) > 1 else []:
        own = train.agreement(score, [e for e in held_set if parts[e.index] == name])
        metrics.update({f"{name or 'pool'}_{key}": value for key, value in own.items()})
    trainee.model.train()
    return metrics


def stage_train(cfg: TrainDraftSchema, run: Path, data: dict, vocab: list[int], pad: int) -> torch.nn.Module:
    t = cfg.train
    ckpt_dir = run / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    if memory.keep_freed_memory():  # else each step faults its temporaries back in (treespec.training.memory)
        log.info("glibc malloc keeps freed memory in the process (at most 2 arenas)")
    examples = train.make_examples(data, vocab, t.max_len)
    train_idx, held_idx = corpus.split_holdout([data["pool_index"][e.index] for e in examples], t.holdout_fraction, cfg.seed)
    train_set, held_set = [examples[i] for i in train_idx], [examples[i] for i in held_idx]
    tokens_per_epoch = sum(len(e.input_ids) for e in train_set)
    steps_per_epoch = max(1, round(tokens_per_epoch / (t.tokens_per_batch * 0.85)))
    total = t.max_steps or steps_per_epoch * t.epochs

    checkpoints = sorted(ckpt_dir.glob("step_*.pt"))
    trainee = make_trainee(cfg, run, data, vocab, pad)
    model = trainee.model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=t.lr, weight_decay=t.weight_decay, betas=(0.9, 0.98))
    step, epoch, consumed = 0, 0, 0  # consumed = batches of `epoch` already trained on
    if checkpoints:
        state = torch.load(checkpoints[-1], weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, epoch, consumed = state["step"], state["epoch"], state["consumed"]
        log.info("resumed from %s (step %d)", checkpoints[-1].name, step)
    if step >= total:
        return model

    autocast = train_precision(cfg) == "bfloat16"
    with open(run / "train_log.jsonl", "a") as log_file:
        if step == 0:
            metrics = evaluate(trainee, held_set, data.get("part"))
            log_file.write(json.dumps({"step": 0, **metrics}) + "\n")
            log.info("step 0 held-out %s", metrics)
        bar = tqdm(total=total, initial=step, desc="train", unit="step")
        losses: list[float] = []
        while step < total:
            order = random.Random(cfg.seed * 7919 + epoch)
            batches = list(train.token_batches(train_set, t.tokens_per_batch, order))
            for chunk in batches[consumed:]:
                if step >= total:
                    break
                tick = time.perf_counter()
                lr = train.cosine_lr(step, total, t.warmup_steps, t.lr, t.min_lr)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = trainee.forward(chunk)[0]
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(parameters, t.grad_clip)
                optimizer.step()
                step, consumed = step + 1, consumed + 1
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}", lr=f"{lr:.1e}")
                row = {"step": step, "epoch": epoch, "loss": round(loss.item(), 5), "lr": lr,
                       "seconds": round(time.perf_counter() - tick, 3)}
                if step % t.eval_every == 0 or step == total:
                    row.update(evaluate(trainee, held_set, data.get("part")))
                    log.info("step %d held-out %s", step, {k: v for k, v in row.items() if "agree" in k or "top4" in k})
                log_file.write(json.dumps(row) + "\n")
                log_file.flush()
                if step % t.checkpoint_every == 0 or step == total:
                    tmp = ckpt_dir / ".tmp.pt"
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                                "epoch": epoch, "consumed": consumed}, tmp)
                    tmp.rename(ckpt_dir / f"step_{step:06d}.pt")
                    for old in sorted(ckpt_dir.glob("step_*.pt"))[:-2]:
                        old.unlink()
            if consumed >= len(batches):
                epoch, consumed = epoch + 1, 0
        bar.close()
    return model


def stage_export(cfg: TrainDraftSchema, run: Path, draft: torch.nn.Module, data: dict, vocab_info: dict,
                 parts: list[CorpusPart]) -> Path:
    out = Path(cfg.export.dir) if cfg.export.dir else run / "draft"
    out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, cfg.export.dtype)
    draft.to(dtype).save_pretrained(out)
    draft.float()
    load_tokenizer(cfg.target).save_pretrained(out)
    log_rows = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    summaries = [part_summary(part) for part in parts]
    summary = {
        "target": cfg.target,
        "answers": len(data["input_ids"]),
        "answer_tokens": int(sum(len(ids) - plen for ids, plen in zip(data["input_ids"], data["prompt_len"]))),
        "answers_by_mode": {m: data["mode"].count(m) for m in sorted(set(data["mode"]))},
        "followup_answers": data["part"].count(FOLLOWUPS),
        "self_prompt_answers": data["part"].count(SELF),
        "generation_seconds": round(sum(part["seconds"] for part in summaries), 1),
        "corpus": summaries[0],
        "self_prompts": next((totals for part, totals in zip(parts, summaries) if part.name == SELF), None),
        "followups": next((totals for part, totals in zip(parts, summaries) if part.name == FOLLOWUPS), None),
        "teacher_precision": teacher_precision(cfg),
        "train_precision": train_precision(cfg),
        "train_steps": log_rows[-1]["step"],
        "train_seconds": round(sum(r.get("seconds", 0) for r in log_rows), 1),
        "train_machine": corpus.machine()["cpu"],  # where the export ran: the training's machine unless resumed elsewhere
        "train_threads": torch.get_num_threads(),
        "final_heldout": {k: v for k, v in log_rows[-1].items() if "agree" in k or "top4" in k},
        "output_vocab": vocab_info["size"],
        "output_vocab_start": vocab_info.get("start_size"),  # the start draft's, when vocab.grow added tokens to it
        "output_vocab_answer_coverage": round(vocab_info["answer_token_coverage"], 4),
        "parameters": sum(p.numel() for p in draft.parameters()),
        "config": dataclasses.asdict(cfg),
    }
    summary["weights_mb"] = round(sum(p.stat().st_size for p in out.glob("*.safetensors")) / 1e6, 2)
    (out / "training_summary.json").write_text(json.dumps(summary, indent=1))
    (out / "README.md").write_text(model_card(summary, draft))
    return out


STAGES = ("pool", "generate", "self_prompts", "followups", "teacher", "vocab", "train", "export")


def run_stages(cfg: TrainDraftSchema, run: Path) -> None:
    """Run the stages listed in `cfg.stages` in their order (STAGES) in the run directory `run`; pool always runs
    (the other stages read its prompts), and each stage skips what is already on disk, so a run resumes."""
    unknown = sorted(set(cfg.stages) - set(STAGES))
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; the stages are {list(STAGES)}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    prompts = stage_pool(cfg, run)
    if "generate" in cfg.stages:
        stage_generate(cfg, run, prompts)
    if "self_prompts" in cfg.stages:
        stage_self_prompts(cfg, run)
    if "followups" in cfg.stages:
        stage_followups(cfg, run, prompts)
    if not {"teacher", "vocab", "train", "export"} & set(cfg.stages):
        return
    tokenizer = load_tokenizer(cfg.target)
    pad = special_ids(tokenizer)[1]
    parts = corpus_parts(cfg, run, tokenizer)
    if "teacher" in cfg.stages:
        stage_teacher(cfg, run, parts, pad)
    if not {"vocab", "train", "export"} & set(cfg.stages):
        return
    data = load_data(cfg, run, parts)
    vocab = stage_vocab(cfg, run, data, tokenizer.eos_token_id)
    if {"train", "export"} & set(cfg.stages):
        draft = stage_train(cfg, run, data, vocab, pad)
        if "export" in cfg.stages:
            out = stage_export(cfg, run, draft, data, json.loads((run / "vocab.json").read_text()), parts)
            log.info("draft written to %s", out)
