"""Medusa heads (treespec.models.medusa_head) trained by self-distillation on the committed corpus
(experiments/train_medusa.py, conf/train_medusa.yaml drive it).

The target is teacher-forced over the first `data.shards` shards of its corpus (`distill_data.teacher_pass`: its
normed last hidden states h_t and its top-k log-probabilities at every answer position, cached per shard in the
run directory). Head k learns, from h_t, the target's own distribution for token t+k+1 (the one it gives at
position t+k): cross-entropy against that top-k, renormalised (forward KL up to a constant), through the target's
frozen LM head, over random batches of positions. Positions t run from the prompt's position P-1-k on, so the
first decoding step (h = the prompt's second-to-last token) is trained as well. Held out: the corpus's last
`data.heldout_shards` shards; reported per head: top-1 agreement with the target's greedy token there and the
share where that token is in the head's top 3, teacher-forced.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm
from transformers import PreTrainedModel

from treespec.drafters.vocab import token_counts, vocab_subset
from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.models import load_model
from treespec.models.medusa_head import MedusaHeads, new_heads, with_proposal_vocab
from treespec.training import distill_data, train
from treespec.training.corpus_stages import resolve_precision
from treespec.training.model_card import medusa_card
from treespec.training.run_corpus import REPO

log = logging.getLogger("train_medusa")
ISA = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # the flags a model card names


@dataclass
class MedusaDataSpec:
    dir: Optional[str] = None  # the corpus (relative to the repository); null: corpus/<target>
    shards: int = 12  # the first N shards (pool order) train the heads
    heldout_shards: int = 1  # the corpus's last N shards are held out (never trained on)


@dataclass
class MedusaTeacherSpec:
    keep_top: int = 20
    tokens_per_batch: int = 4096
    dtype: str = "auto"  # the target's precision when teacher forcing: float32, bfloat16 or auto (bf16 where fast)


@dataclass
class MedusaOptimSpec:
    positions_per_batch: int = 1024  # answer positions per step (each feeds all K heads)
    epochs: float = 2.0
    max_steps: Optional[int] = None  # overrides epochs when set
    dtype: str = "auto"  # the heads' forward: float32, bfloat16 (CPU autocast) or auto (bf16 where fast)
    lr: float = 3.0e-3
    min_lr: float = 1.0e-4
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    eval_every: int = 100


@dataclass
class MedusaExportSpec:
    dir: Optional[str] = None  # where the heads go (relative to the repository); null: <run dir>/medusa
    dtype: str = "bfloat16"
    proposal_vocab: int = 8192  # the heads propose from the N tokens most frequent in their training answers; 0: all


@dataclass
class TrainMedusaSchema:
    target: str = "smollm2-135m-instruct"
    num_heads: int = 4
    seed: int = 0
    threads: int = 2
    data: MedusaDataSpec = field(default_factory=MedusaDataSpec)
    teacher: MedusaTeacherSpec = field(default_factory=MedusaTeacherSpec)
    train: MedusaOptimSpec = field(default_factory=MedusaOptimSpec)
    export: MedusaExportSpec = field(default_factory=MedusaExportSpec)


@dataclass(frozen=True)
class Positions:
    """Teacher-forced positions of a set of answers, flat: features [N, H] float16 (h_t), top_ids [R, k] int64 and
    top_logprobs [R, k] float32 (the target's top-k at answer rows), and for head k (1-based) `rows[k - 1]` [N]:
    the answer row of h_t's label (position t+k), -1 where t+k lies outside the answer."""

    features: torch.Tensor
    top_ids: torch.Tensor
    top_logprobs: torch.Tensor
    rows: tuple[torch.Tensor, ...]

    @property
    def size(self) -> int:
        return self.features.shape[0]


def corpus_directory(cfg: TrainMedusaSchema) -> Path:
    if cfg.data.dir:
        path = Path(cfg.data.dir)
        return path if path.is_absolute() else REPO / path
    return REPO / "corpus" / cfg.target


def split_shards(manifest: dict, shards: int, heldout: int) -> tuple[list[dict], list[dict]]:
    """(the first `shards` shards, the last `heldout`) in pool order; ConfigError if they would overlap."""
    entries = sorted(manifest["shards"], key=lambda e: e["prompts"]["start"])
    if shards < 1 or heldout < 1 or shards + heldout > len(entries):
        raise ConfigError(f"data.shards={shards} and data.heldout_shards={heldout} need {shards + heldout} of the "
                          f"corpus's {len(entries)} shards (at least one of each)")
    return entries[:shards], entries[len(entries) - heldout:]


def teacher_shard(target: PreTrainedModel, directory: Path, entry: dict, cache: Path, cfg: TrainMedusaSchema,
                  pad: int) -> dict:
    """One shard's teacher pass, cached in `cache`: per answer, features [L - s, H] from position s = max(0, P - 1
    - K) on, its top-k rows [A, k], P and s; and the seconds the pass took when it was computed."""
    path = cache / f"{Path(entry['file']).stem}.{entry['sha256'][:16]}.top{cfg.teacher.keep_top}.k{cfg.num_heads}.pt"
    if path.exists():
        return torch.load(path)
    tick = time.perf_counter()
    pairs = corpus.records(corpus.read_shard(directory / entry["file"]))
    out = distill_data.teacher_pass(target, [torch.from_numpy(ids.astype("int64")) for ids, _ in pairs],
                                    [p for _, p in pairs], keep_top=cfg.teacher.keep_top, features=True,
                                    tokens_per_batch=cfg.teacher.tokens_per_batch, pad_token_id=pad)
    starts = [max(0, p - 1 - cfg.num_heads) for _, p in pairs]
    shard = {"features": [f[s:] for f, s in zip(out.features, starts)], "top_ids": out.top_ids,
             "top_logprobs": out.top_logprobs, "prompt_len": [p for _, p in pairs], "start": starts,
             "seconds": time.perf_counter() - tick}
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(shard, tmp)
    tmp.rename(path)
    return shard


def flatten(shards: list[dict], num_heads: int) -> Positions:
    """The shards' answers as flat `Positions` (see there)."""
    features, top_ids, top_lp, rows = [], [], [], [[] for _ in range(num_heads)]
    base_row = 0
    for shard in shards:
        for feats, ids, lps, plen, start in zip(shard["features"], shard["top_ids"], shard["top_logprobs"],
                                                shard["prompt_len"], shard["start"]):
            answer = ids.shape[0]  # rows 0..A-1 sit at positions P-1 .. P+A-2
            t = torch.arange(start, start + feats.shape[0])  # positions of the stored features
            for k in range(1, num_heads + 1):
                row = t + k - (plen - 1)
                rows[k - 1].append(torch.where((row >= 0) & (row < answer), row + base_row, -1))
            features.append(feats)
            top_ids.append(ids.long())
            top_lp.append(lps.float())
            base_row += answer
    return Positions(torch.cat(features), torch.cat(top_ids), torch.cat(top_lp), tuple(torch.cat(r) for r in rows))


def head_loss(heads: MedusaHeads, lm_head: torch.nn.Module, data: Positions, index: torch.Tensor,
              head: int) -> torch.Tensor | None:
    """Head `head`'s soft cross-entropy over the positions `index` [B] that have a label (None if none has)."""
    rows = data.rows[head - 1][index]
    valid = rows >= 0
    if not bool(valid.any()):
        return None
    logits = heads(data.features[index[valid]].float(), lm_head, [head])[:, 0]  # [b, V], bf16 under autocast
    p = data.top_logprobs[rows[valid]].softmax(-1)  # [b, k]: the top-k renormalised
    # -sum_j p_j log q_j = logsumexp(z) - sum_j p_j z_j (in the logits' dtype: twice as fast as fp32 on a CPU)
    return (torch.logsumexp(logits, dim=-1).float() - (p * logits.gather(1, data.top_ids[rows[valid]]).float()).sum(-1)).mean()


@torch.no_grad()
def evaluate(heads: MedusaHeads, lm_head: torch.nn.Module, data: Positions, chunk: int = 2048,
             autocast: bool = False) -> dict[str, float]:
    """Per head k: `head{k}_agree_top1` (argmax == the target's greedy token at t+k) and `head{k}_top3` (that token
    among the head's top 3), teacher-forced over every labelled position (the forward in bf16 with `autocast`)."""
    was_training = heads.training
    heads.eval()
    metrics = {}
    for k in range(1, heads.num_heads + 1):
        valid = torch.nonzero(data.rows[k - 1] >= 0)[:, 0]
        top1 = top3 = 0
        for begin in range(0, len(valid), chunk):
            index = valid[begin:begin + chunk]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = heads(data.features[index].float(), lm_head, [k])[:, 0]
            greedy = data.top_ids[data.rows[k - 1][index], 0]
            best = logits.topk(3, dim=-1).indices
            top1 += int((best[:, 0] == greedy).sum())
            top3 += int((best == greedy[:, None]).any(-1).sum())
        metrics[f"head{k}_agree_top1"] = top1 / max(1, len(valid))
        metrics[f"head{k}_top3"] = top3 / max(1, len(valid))
    heads.train(was_training)
    return metrics


def train_heads(cfg: TrainMedusaSchema, heads: MedusaHeads, lm_head: torch.nn.Module, data: Positions,
                held: Positions, run: Path) -> list[dict]:
    """AdamW over random batches of positions, every head's loss on each; returns the log rows (train_log.jsonl)."""
    t = cfg.train
    labelled = torch.nonzero((torch.stack(data.rows) >= 0).any(0))[:, 0]
    steps_per_epoch = max(1, len(labelled) // t.positions_per_batch)
    total = t.max_steps or max(1, round(steps_per_epoch * t.epochs))
    parameters = [p for p in heads.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=t.lr, weight_decay=t.weight_decay, betas=(0.9, 0.98))
    autocast = resolve_precision(t.dtype, "train.dtype") == "bfloat16"
    generator = torch.Generator().manual_seed(cfg.seed)
    rows = [{"step": 0, **evaluate(heads, lm_head, held, autocast=autocast)}]
    log.info("step 0 held-out %s", rows[-1])
    heads.train()
    order = labelled[torch.randperm(len(labelled), generator=generator)]
    cursor = 0
    with open(run / "train_log.jsonl", "w") as log_file:
        log_file.write(json.dumps(rows[-1]) + "\n")
        for step in tqdm(range(1, total + 1), desc="train", unit="step"):
            if cursor + t.positions_per_batch > len(order):
                order, cursor = labelled[torch.randperm(len(labelled), generator=generator)], 0
            index = order[cursor:cursor + t.positions_per_batch]
            cursor += t.positions_per_batch
            tick = time.perf_counter()
            lr = train.cosine_lr(step - 1, total, t.warmup_steps, t.lr, t.min_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            losses = {}
            for k in range(1, heads.num_heads + 1):  # one head at a time: [B, V] logits, not [B, K, V]
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = head_loss(heads, lm_head, data, index, k)
                if loss is not None:
                    (loss / heads.num_heads).backward()
                    losses[f"loss{k}"] = round(loss.item(), 4)
            torch.nn.utils.clip_grad_norm_(parameters, t.grad_clip)
            optimizer.step()
            row = {"step": step, "lr": lr, **losses, "seconds": round(time.perf_counter() - tick, 3)}
            if step % t.eval_every == 0 or step == total:
                row.update(evaluate(heads, lm_head, held, autocast=autocast))
                log.info("step %d held-out %s", step, {k: round(v, 4) for k, v in row.items() if "head" in k})
            rows.append(row)
            log_file.write(json.dumps(row) + "\n")
            log_file.flush()
    return rows


def padding_id(target: PreTrainedModel) -> int:
    """The id right padding uses in the teacher pass (masked out, so any id will do): the target's pad token, else
    its EOS, else 0."""
    config = target.config.get_text_config()
    for value in (config.pad_token_id, config.eos_token_id, 0):
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return 0


def machine_tag() -> dict:
    """The CPU's model name, its ISA flags that matter here, and the torch threads."""
    flags = corpus.cpu_flags()
    return {"cpu": corpus.machine()["cpu"], "isa": [f for f in ISA if f in flags], "threads": torch.get_num_threads()}


def proposal_vocabulary(target: PreTrainedModel, directory: Path, train_entries: list[dict],
                        held_entries: list[dict], size: int) -> tuple[torch.Tensor, dict]:
    """The `size` token ids most frequent in the training shards' answers, plus the target's special ids (EOS, BOS,
    pad): [S] sorted; and what they cover: the share of held-out answer tokens among them."""
    vocab = target.config.get_text_config().vocab_size

    def answers(entries: list[dict]) -> list[list[int]]:
        return [ids[p:].tolist() for e in entries for ids, p in corpus.records(corpus.read_shard(directory / e["file"]))]

    config = target.config.get_text_config()
    special = [t for name in ("eos_token_id", "bos_token_id", "pad_token_id") for t in
               ([getattr(config, name)] if isinstance(getattr(config, name, None), int) else
                list(getattr(config, name, None) or ()))]
    ids = vocab_subset(token_counts(answers(train_entries), vocab), min(size, vocab), always=special)
    held = torch.tensor([t for answer in answers(held_entries) for t in answer], dtype=torch.long)
    inside = torch.zeros(vocab, dtype=torch.bool)
    inside[ids] = True
    coverage = float(inside[held].float().mean()) if held.numel() else float("nan")
    return ids, {"size": int(ids.numel()), "heldout_coverage": round(coverage, 4)}


def export(cfg: TrainMedusaSchema, run: Path, heads: MedusaHeads, summary: dict) -> Path:
    """The heads as a model directory (config.json, model.safetensors), training_summary.json and README.md."""
    out = Path(cfg.export.dir) if cfg.export.dir else run / "medusa"
    out = out if out.is_absolute() else REPO / out
    out.mkdir(parents=True, exist_ok=True)
    heads.to(getattr(torch, cfg.export.dtype)).save_pretrained(out)
    heads.float()
    summary["weights_mb"] = round(sum(p.stat().st_size for p in out.glob("*.safetensors")) / 1e6, 2)
    (out / "training_summary.json").write_text(json.dumps(summary, indent=1))
    (out / "README.md").write_text(medusa_card(summary))
    return out


def run(cfg: TrainMedusaSchema, run_dir: Path) -> Path:
    """Teacher pass (cached), training and export; returns the exported directory."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    begun = corpus.now()
    directory = corpus_directory(cfg)
    manifest = corpus.read_manifest(directory)
    if manifest is None:
        raise ConfigError(f"no corpus at {directory}: make one with experiments/train_draft.py stages=[pool,generate]")
    train_entries, held_entries = split_shards(manifest, cfg.data.shards, cfg.data.heldout_shards)
    target = load_model(cfg.target)
    pad = padding_id(target)
    precision = resolve_precision(cfg.teacher.dtype, "teacher.dtype")
    teacher = target if precision == "float32" else load_model(cfg.target, dtype=precision)
    cache = run_dir / "teacher" / precision
    cache.mkdir(parents=True, exist_ok=True)
    tick = time.perf_counter()
    shards = {e["file"]: teacher_shard(teacher, directory, e, cache, cfg, pad)
              for e in tqdm(train_entries + held_entries, desc="teacher", unit="shard")}
    teacher_seconds = time.perf_counter() - tick  # of this run; `seconds` of cached passes is when they were made
    teacher_seconds = max(teacher_seconds, sum(shard.get("seconds", 0.0) for shard in shards.values()))
    del teacher
    data = flatten([shards[e["file"]] for e in train_entries], cfg.num_heads)
    held = flatten([shards[e["file"]] for e in held_entries], cfg.num_heads)
    log.info("teacher pass %.0f s (%s); %d training positions, %d held out", teacher_seconds, precision, data.size,
             held.size)
    torch.manual_seed(cfg.seed)
    heads = new_heads(target, cfg.num_heads, cfg.target)
    lm_head = target.get_output_embeddings().requires_grad_(False)
    tick = time.perf_counter()
    rows = train_heads(cfg, heads, lm_head, data, held, run_dir)
    train_seconds = time.perf_counter() - tick
    final = {k: v for k, v in rows[-1].items() if k.startswith("head")}
    summary = {
        "target": cfg.target,
        "num_heads": cfg.num_heads,
        "hidden_size": heads.config.hidden_size,
        "corpus": str(directory.relative_to(REPO)) if directory.is_relative_to(REPO) else str(directory),
        "train_shards": [e["file"] for e in train_entries],
        "heldout_shards": [e["file"] for e in held_entries],
        "answers": sum(e["answers"] for e in train_entries),
        "answer_tokens": sum(e["answer_tokens"] for e in train_entries),
        "positions": data.size,
        "heldout_positions": held.size,
        "teacher_precision": precision,
        "teacher_seconds": round(teacher_seconds, 1),
        "train_precision": resolve_precision(cfg.train.dtype, "train.dtype"),
        "train_steps": rows[-1]["step"],
        "train_seconds": round(train_seconds, 1),
        "machine": machine_tag(),
        "date": begun,
        "command": "python experiments/train_medusa.py " + " ".join(sys.argv[1:]),
        "heldout_at_start": {k: v for k, v in rows[0].items() if k.startswith("head")},
        "final_heldout": final,
        "parameters": sum(p.numel() for p in heads.parameters()),
        "config": dataclasses.asdict(cfg),
    }
    if cfg.export.proposal_vocab:
        ids, summary["proposal_vocab"] = proposal_vocabulary(target, directory, train_entries, held_entries,
                                                             cfg.export.proposal_vocab)
        with_proposal_vocab(heads, ids)
    out = export(cfg, run_dir, heads, summary)
    log.info("Medusa heads written to %s", out)
    return out
