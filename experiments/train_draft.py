"""Train a draft model for a target by self-distillation (config: conf/train_draft.yaml).

    python experiments/train_draft.py                                  # the default pair's draft
    python experiments/train_draft.py stages=[pool,generate] generate.max_hours=2   # only add to the corpus
    python experiments/train_draft.py stages=[pool,followups] generate.max_hours=1  # add second turns
    python experiments/train_draft.py stages=[self_prompts] generate.max_hours=1   # add requests the target writes
    python experiments/train_draft.py hydra.run.dir=outputs/train_draft/<run>   # resume that run

Stages (each skips work already on disk, so an interrupted run resumes where it stopped):
  pool      prompts.jsonl: a template prompt pool disjoint from MT-Bench/HumanEval, each with a sampling mode
  generate  the corpus (treespec.training.corpus; in the repository, corpus/<target>/ for a built-in target):
            the target's answers as token-id shards with a manifest. It resumes from what is there and
            appends shards for pool prompts not yet answered; untrusted shards are dropped and regenerated
  self_prompts (only when listed) the corpus's self-prompt part, <corpus>/self/: user requests the target writes
            itself after its chat template's user-turn prefix (treespec.training.self_prompts, Magpie), screened
            against MT-Bench and HumanEval, then answered as pool prompts are. Teacher, vocab and train read it
            too (self_prompts.train)
  followups (only when listed) the corpus's multi-turn part, <corpus>/turn2/: for each first-turn shard, the
            target's answers to a follow-up question (prompt_pool.followup) asked after its own first answer;
            a follow-up shard whose first-turn shard changed is dropped and made again. Teacher, vocab and
            train read it too (followups.train)
  teacher   teacher/: soft targets (the target's top-k at every answer position) recomputed from the corpus
            by teacher forcing, and for draft.kind=eagle the target's features, in the same pass
  vocab     vocab.json: the draft's output vocabulary (most frequent answer tokens) and its coverage
  train     checkpoints/, train_log.jsonl: distillation (treespec.training.train), held-out agreement
  export    draft/: a transformers model directory (config, safetensors, tokenizer) + training_summary.json
"""

from __future__ import annotations

import copy
import json
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec.app import cli
from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.eval.corpus import FOLLOWUPS, SELF
from treespec.eval.data import encode_chat, encode_prompt, humaneval, mtbench
from treespec.eval.prompt_pool import CATEGORIES, build_prompt_pool, followup
from treespec.models import load_model, load_tokenizer
from treespec.models.eagle_head import init_eagle_from_target
from treespec.training import distill_data, memory, self_prompts, train
from treespec.training.model_card import model_card

log = logging.getLogger("train_draft")
REPO = Path(__file__).resolve().parents[1]


@dataclass
class PoolSpec:
    size: int = 32000


@dataclass
class ModeSpec:
    name: str = "greedy"
    temperature: float = 0.0
    weight: float = 1.0


@dataclass
class CorpusSpec:
    dir: Optional[str] = None  # default: corpus/<target> in the repository for a built-in target, else <run>/corpus


@dataclass
class GenerateSpec:
    prompts: Optional[int] = None  # answer the first N pool prompts in all (None: the whole pool)
    max_new_tokens: int = 192
    batch_size: int = 64
    shard_prompts: int = 384
    max_shards: Optional[int] = None  # at most this many new shards in this run
    max_hours: Optional[float] = None  # start no new shard after this long
    dtype: str = "auto"  # auto: bfloat16 where the CPU has AMX / AVX512-BF16, else float32
    bf16_check: int = 16  # greedy prompts per bf16 shard regenerated in fp32 (0: none)
    modes: list[ModeSpec] = field(default_factory=list)


@dataclass
class FollowupSpec:
    train: bool = True  # teacher, vocab and train also read the corpus's second turns (<corpus>/turn2) when it has any


@dataclass
class SelfPromptSpec:
    count: int = 100000  # requests (numbered from 0) that the self_prompts stage may write in all
    temperature: float = 1.0  # sampling temperature of the requests
    max_query_tokens: int = 96  # a request not finished within this many tokens is rejected
    train: bool = True  # teacher, vocab and train also read the self-prompt part (<corpus>/self) when it has any


@dataclass
class TeacherSpec:
    keep_top: int = 20
    tokens_per_batch: int = 4096
    dtype: str = "float32"  # the target's precision when teacher forcing: float32, bfloat16 or auto (bf16 where fast)


@dataclass
class VocabSpec:
    size: int = 6144
    grow: bool = False  # with draft.init_from (eagle): add the most frequent answer tokens the start lacks, up to size


@dataclass
class DraftSpec:
    kind: str = "plain"  # plain: an independent causal LM; eagle: a head reading the target's hidden state
    init_layers: list[int] = field(default_factory=lambda: [0, 1])  # plain: target layers copied
    embed_rank: int = 48  # plain: rank of the factorised input embedding
    eagle_init_layer: Optional[int] = None  # eagle: target layer copied into the head's decoder layer (None: fresh)
    eagle_layers: int = 1  # eagle: decoder layers in the head (with init_from, layers beyond the start's are fresh)
    feature_weight: float = 0.1  # eagle: weight of the feature regression next to the cross-entropy
    feature_noise: float = 0.1  # eagle: relative noise on input features during training
    freeze_head: bool = True  # eagle: keep the target's output rows as the head's LM head
    eagle_unroll: int = 1  # eagle: levels trained (level d > 1: the head reading its own features, as a node d-1 below the root)
    eagle_feature_layers: list[int] = field(default_factory=list)  # eagle: target hidden states fused ([]: the last)
    init_from: Optional[str] = None  # a draft directory (same kind and vocabulary) to start from instead of the target


@dataclass
class TrainSpec:
    holdout_fraction: float = 0.03
    max_len: int = 512
    tokens_per_batch: int = 6144
    epochs: int = 3
    max_steps: Optional[int] = None
    dtype: str = "float32"  # the training forward: float32, bfloat16 (CPU autocast) or auto (bf16 where fast)
    lr: float = 1e-3
    min_lr: float = 5e-5
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    eval_every: int = 100
    checkpoint_every: int = 100


@dataclass
class ExportSpec:
    dir: Optional[str] = None
    dtype: str = "float16"


@dataclass
class TrainDraftSchema:
    target: str = "smollm2-135m-instruct"
    seed: int = 0
    threads: int = 0
    stages: list[str] = field(default_factory=lambda: ["pool", "generate", "teacher", "vocab", "train", "export"])
    pool: PoolSpec = field(default_factory=PoolSpec)
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    generate: GenerateSpec = field(default_factory=GenerateSpec)
    followups: FollowupSpec = field(default_factory=FollowupSpec)
    self_prompts: SelfPromptSpec = field(default_factory=SelfPromptSpec)
    teacher: TeacherSpec = field(default_factory=TeacherSpec)
    vocab: VocabSpec = field(default_factory=VocabSpec)
    draft: DraftSpec = field(default_factory=DraftSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    export: ExportSpec = field(default_factory=ExportSpec)


def stage_pool(cfg: DictConfig, run: Path) -> list[dict]:
    path = run / "prompts.jsonl"
    if not path.exists():
        pool = build_prompt_pool(cfg.pool.size, seed=cfg.seed)
        modes = [distill_data.SamplingMode(**m) for m in cfg.generate.modes]
        chosen = distill_data.assign_modes(len(pool), modes, cfg.seed)
        rows = [{"text": p.text, "category": p.category, "mode": m.name} for p, m in zip(pool, chosen)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [json.loads(line) for line in path.read_text().splitlines()]


def corpus_dir(cfg: DictConfig, run: Path) -> Path:
    """Where the corpus lives: corpus.dir (relative to the repository), else corpus/<target> in the repository
    for a built-in target name, else <run>/corpus (a target given as a path gets a corpus of its own run)."""
    if cfg.corpus.dir:
        path = Path(cfg.corpus.dir)
        return path if path.is_absolute() else REPO / path
    if "/" not in cfg.target and not Path(cfg.target).exists():
        return REPO / "corpus" / cfg.target
    return run / "corpus"


def corpus_header(cfg: DictConfig, vocab_size: int) -> dict:
    """What a corpus is made of; appending requires the same (modes are assigned by
    distill_data.assign_modes(pool size, modes, pool seed))."""
    return {"target": cfg.target, "target_files": corpus.target_files(cfg.target), "vocab_size": vocab_size,
            "id_dtype": corpus.id_dtype(vocab_size),
            "pool": {"builder": "treespec.training.prompt_pool.build_prompt_pool", "size": cfg.pool.size, "seed": cfg.seed},
            "modes": [{"name": m.name, "temperature": m.temperature, "weight": m.weight} for m in cfg.generate.modes]}


def resolve_precision(name: str, key: str = "generate.dtype") -> str:
    """A dtype key (generate, teacher or train) resolved: float32 or bfloat16 as given, or for auto bf16 where this
    CPU runs it fast."""
    if name == "auto":
        return "bfloat16" if corpus.cpu_has_fast_bf16() else "float32"
    if name not in ("float32", "bfloat16"):
        raise ConfigError(f"{key} must be auto, float32 or bfloat16, got '{name}'")
    return name


def teacher_precision(cfg: DictConfig) -> str:
    """teacher.dtype resolved on this machine: float32 or bfloat16."""
    return resolve_precision(cfg.teacher.dtype, "teacher.dtype")


def train_precision(cfg: DictConfig) -> str:
    """train.dtype resolved on this machine: float32, or bfloat16 for the training forward under autocast (weights,
    optimizer, losses' softmax and held-out evaluation stay float32)."""
    return resolve_precision(cfg.train.dtype, "train.dtype")


def open_run_corpus(cfg: DictConfig, run: Path, tokenizer) -> tuple[Path, dict]:
    directory = corpus_dir(cfg, run)
    manifest, problems = corpus.open_corpus(directory, corpus_header(cfg, len(tokenizer)))
    for problem in problems:
        log.warning("corpus %s: %s; dropped, its prompts will be answered again", directory, problem)
    return directory, manifest


def mode_table(manifest: dict) -> dict[str, tuple[int, float]]:
    """A corpus's sampling modes by name: (index in the manifest, temperature)."""
    return {m["name"]: (index, m["temperature"]) for index, m in enumerate(manifest["modes"])}


def log_holdings(kind: str, directory: Path, manifest: dict, plan: str) -> None:
    """One log line: what a corpus part holds, and what this run will add."""
    totals = corpus.summary(manifest)
    log.info("%s %s: %d answers, %d answer tokens in %d shards; %s", kind, directory, totals["answers"],
             totals["answer_tokens"], totals["shards"], plan)


def within_hours(shards, max_hours: Optional[float], name: str):
    """The shards, until `max_hours` (None: no limit) have passed since the first began: none starts after that.
    `name.format(*shard)` (or of the shard itself when it is a dict) names the first shard not started."""
    begun = time.perf_counter()
    for shard in shards:
        if max_hours is not None and time.perf_counter() - begun > max_hours * 3600:
            log.info("generate.max_hours=%s reached: stopping before %s", max_hours,
                     name.format(shard) if isinstance(shard, dict) else name.format(*shard))
            return
        yield shard


def stage_generate(cfg: DictConfig, run: Path, prompts: list[dict]) -> None:
    """Append shards to the corpus for the first `generate.prompts` pool prompts that no trusted shard answers."""
    g = cfg.generate
    tokenizer = load_tokenizer(cfg.target)
    directory, manifest = open_run_corpus(cfg, run, tokenizer)
    wanted = len(prompts) if g.prompts is None else min(g.prompts, len(prompts))
    todo = corpus.plan_shards(manifest, wanted, g.shard_prompts)[: g.max_shards]
    log_holdings("corpus", directory, manifest, f"{len(todo)} new shards to generate")
    if not todo:
        return
    target, generator, precision = generators(cfg)
    modes = mode_table(manifest)
    for start, stop in within_hours(tqdm(todo, desc="shards", unit="shard"), g.max_hours, "prompts {0}..{1}"):
        tick = time.perf_counter()
        rows = prompts[start:stop]
        encoded = [encode_prompt(tokenizer, r["text"]) for r in rows]
        answers, check = answer_prompts(cfg, generator, target, encoded, [r["mode"] for r in rows], modes,
                                        special_ids(tokenizer), f"prompts {start}..{stop}", cfg.seed * 100003 + start)
        records = [corpus.Record(start + i, modes[r["mode"]][0], CATEGORIES.index(r["category"]), encoded[i], answers[i])
                   for i, r in enumerate(rows)]
        entry = corpus.write_shard(directory, start, stop, records, manifest["id_dtype"])
        entry.update(shard_provenance(cfg, [r["mode"] for r in rows], modes, precision, check, tick))
        manifest = corpus.append_shard(directory, manifest, entry)


def followup_header(cfg: DictConfig, vocab_size: int) -> dict:
    """The multi-turn part's header: the corpus's, its pool marked as second turns after the first turns' answers."""
    header = corpus_header(cfg, vocab_size)
    header["pool"] = {**header["pool"], "turn": 2, "followup": "treespec.training.prompt_pool.followup",
                      "first_turn": "the target's answer in the parent corpus's shard of the same name"}
    return header


def open_followups(cfg: DictConfig, run: Path, tokenizer, first: dict, *, create: bool) -> tuple[Path, Optional[dict]]:
    """The multi-turn part of the run's corpus (None when there is none and not `create`), keeping only shards
    whose first-turn shard is still the one they were made from (others are deleted and made again)."""
    directory = corpus_dir(cfg, run) / FOLLOWUPS
    if not create and not (directory / corpus.MANIFEST).exists():
        return directory, None
    manifest, problems = corpus.open_corpus(directory, followup_header(cfg, len(tokenizer)))
    trusted = {e["file"]: e["sha256"] for e in first["shards"]}
    stale = [e for e in manifest["shards"] if trusted.get(e["file"]) != e.get("first_turn", {}).get("sha256")]
    problems += [f"{e['file']} follows a first-turn shard that is gone or was made again" for e in stale]
    for problem in problems:
        log.warning("corpus %s: %s; dropped, its follow-ups will be answered again", directory, problem)
    return directory, corpus.drop_shards(directory, manifest, stale) if stale else manifest


def followup_prompt(tokenizer, row: dict, answer: np.ndarray, index: int, seed: int) -> list[int]:
    """A conversation's ids: the pool prompt, the target's own first answer (without its EOS), a follow-up."""
    text = tokenizer.decode(answer[:-1] if len(answer) and answer[-1] == tokenizer.eos_token_id else answer,
                            skip_special_tokens=True)
    return encode_chat(tokenizer, [{"role": "user", "content": row["text"]}, {"role": "assistant", "content": text},
                                   {"role": "user", "content": followup(row["category"], index, seed)}])


def stage_followups(cfg: DictConfig, run: Path, prompts: list[dict]) -> None:
    """Append to the corpus's multi-turn part (<corpus>/turn2) the target's answers to a follow-up question
    asked after its own first answer, for every first-turn shard not yet followed up (pool order), in the
    first turn's sampling mode; generation settings are the generate stage's."""
    g = cfg.generate
    tokenizer = load_tokenizer(cfg.target)
    first_dir, first = open_run_corpus(cfg, run, tokenizer)
    directory, manifest = open_followups(cfg, run, tokenizer, first, create=True)
    done = {e["file"] for e in manifest["shards"]}
    todo = [e for e in sorted(first["shards"], key=lambda e: e["prompts"]["start"]) if e["file"] not in done][: g.max_shards]
    log_holdings("follow-ups", directory, manifest, f"{len(todo)} first-turn shards to follow up")
    if not todo:
        return
    target, generator, precision = generators(cfg)
    names = [m["name"] for m in manifest["modes"]]
    modes = mode_table(manifest)
    for first_entry in within_hours(tqdm(todo, desc="follow-up shards", unit="shard"), g.max_hours,
                                    "the follow-ups of {0[file]}"):
        start, stop = first_entry["prompts"]["start"], first_entry["prompts"]["stop"]
        tick = time.perf_counter()
        arrays = corpus.read_shard(first_dir / first_entry["file"])
        pairs, indices = corpus.records(arrays), [int(i) for i in arrays["pool_index"]]
        row_modes = [names[int(m)] for m in arrays["mode"]]
        encoded = [followup_prompt(tokenizer, prompts[i], ids[plen:], i, cfg.seed) for (ids, plen), i in zip(pairs, indices)]
        answers, check = answer_prompts(cfg, generator, target, encoded, row_modes, modes, special_ids(tokenizer),
                                        f"follow-ups {start}..{stop}", cfg.seed * 100003 + 50021 + start)
        records = [corpus.Record(i, int(m), int(c), e, a)
                   for i, m, c, e, a in zip(indices, arrays["mode"], arrays["category"], encoded, answers)]
        entry = corpus.write_shard(directory, start, stop, records, manifest["id_dtype"])
        entry.update(shard_provenance(cfg, row_modes, modes, precision, check, tick),
                     first_turn={"file": first_entry["file"], "sha256": first_entry["sha256"]})
        manifest = corpus.append_shard(directory, manifest, entry)


def self_prompt_header(cfg: DictConfig, vocab_size: int) -> dict:
    """The self-prompt part's header: the corpus's, its "pool" the request writer's settings."""
    s = cfg.self_prompts
    return {**corpus_header(cfg, vocab_size),
            "pool": {"builder": "treespec.training.self_prompts (the target writes the user turn)", "seed": cfg.seed,
                     "temperature": s.temperature, "max_query_tokens": s.max_query_tokens,
                     "screen": f"finished, >= {self_prompts.MIN_WORDS} words, no 8-word run of MT-Bench or HumanEval, "
                               "no repeat within the shard"}}


def evaluation_texts() -> list[str]:
    """Every MT-Bench turn and HumanEval prompt: what training data must not share an 8-word run with."""
    return [turn for prompt in mtbench() for turn in prompt.turns] + [prompt.text for prompt in humaneval()]


def stage_self_prompts(cfg: DictConfig, run: Path) -> None:
    """Append shards to the corpus's self-prompt part (<corpus>/self): for requests [start, stop) (numbered up
    to `self_prompts.count`), the target writes each user request after its chat template's user-turn prefix, the
    screened ones are answered in a mode seeded per request; generation settings are the generate stage's."""
    g, s = cfg.generate, cfg.self_prompts
    tokenizer = load_tokenizer(cfg.target)
    directory = corpus_dir(cfg, run) / SELF
    manifest, problems = corpus.open_corpus(directory, self_prompt_header(cfg, len(tokenizer)))
    for problem in problems:
        log.warning("corpus %s: %s; dropped, its requests will be written again", directory, problem)
    todo = corpus.plan_shards(manifest, s.count, g.shard_prompts)[: g.max_shards]
    log_holdings("self prompts", directory, manifest, f"{len(todo)} new shards to generate")
    if not todo:
        return
    target, generator, precision = generators(cfg)
    eos, pad = special_ids(tokenizer)
    prefix = tokenizer(self_prompts.query_prefix(tokenizer), add_special_tokens=False)["input_ids"]
    references = evaluation_texts()
    names = [m["name"] for m in manifest["modes"]]
    modes = mode_table(manifest)
    weights = [m["weight"] for m in manifest["modes"]]
    for start, stop in within_hours(tqdm(todo, desc="self-prompt shards", unit="shard"), g.max_hours,
                                    "requests {0}..{1}"):
        tick = time.perf_counter()
        queries, ended = self_prompts.generate_queries(
            generator, prefix, stop - start, temperature=s.temperature, max_tokens=s.max_query_tokens,
            eos_token_id=eos, pad_token_id=pad, batch_size=g.batch_size, seed=cfg.seed * 100003 + 70001 + start)
        texts = [tokenizer.decode(q, skip_special_tokens=True).strip() for q in queries]
        reasons = self_prompts.screen_queries(texts, ended, references)
        kept = [i for i, reason in enumerate(reasons) if reason is None]
        if not kept:
            raise RuntimeError(f"no request of {start}..{stop} passed the screen ({Counter(reasons)})")
        encoded = [encode_prompt(tokenizer, texts[i]) for i in kept]
        row_modes = [names[self_prompts.mode_for(start + i, weights, cfg.seed)] for i in kept]
        answers, check = answer_prompts(cfg, generator, target, encoded, row_modes, modes, (eos, pad),
                                        f"requests {start}..{stop}", cfg.seed * 100003 + 90001 + start)
        records = [corpus.Record(start + i, modes[m][0], 0, e, a) for i, m, e, a in zip(kept, row_modes, encoded, answers)]
        entry = corpus.write_shard(directory, start, stop, records, manifest["id_dtype"])
        entry.update(shard_provenance(cfg, row_modes, modes, precision, check, tick),
                     requests={"written": stop - start, "kept": len(kept),
                               "rejected": dict(Counter(r for r in reasons if r is not None))})
        manifest = corpus.append_shard(directory, manifest, entry)


def special_ids(tokenizer) -> tuple[int, int]:
    """(EOS, padding id: the tokenizer's pad token, else EOS)."""
    eos = tokenizer.eos_token_id
    return eos, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos


def generators(cfg: DictConfig) -> tuple[torch.nn.Module, torch.nn.Module, str]:
    """(the target in fp32, the model that generates: the target or its bf16 copy, that precision's name)."""
    target = load_model(cfg.target)
    precision = resolve_precision(cfg.generate.dtype)
    return target, (target if precision == "float32" else copy.deepcopy(target).to(torch.bfloat16)), precision


def answer_prompts(cfg: DictConfig, generator, target, encoded: list[list[int]], row_modes: list[str],
                   modes: dict[str, tuple[int, float]], eos_pad: tuple[int, int], label: str,
                   seed_base: int) -> tuple[list, Optional[dict]]:
    """The target's answers to chat-encoded prompts, each in its sampling mode (batched by mode and length); when
    the generator is a bf16 copy, the first `generate.bf16_check` greedy answers are redone in fp32 (and kept)
    and the comparison is returned as the check (else None)."""
    g, (eos, pad) = cfg.generate, eos_pad
    answers: list = [None] * len(encoded)
    for name, (_, temperature) in modes.items():
        members = [i for i, mode in enumerate(row_modes) if mode == name]
        for batch in tqdm(distill_data.batches_by_length(members, [len(e) for e in encoded], g.batch_size),
                          desc=f"{label} {name}", leave=False):
            torch.manual_seed(seed_base + batch[0])
            out = distill_data.generate_answers(generator, [encoded[i] for i in batch], temperature=temperature,
                                                max_new_tokens=g.max_new_tokens, eos_token_id=eos, pad_token_id=pad)
            for i, answer in zip(batch, out):
                answers[i] = answer
    check = None
    greedy = [i for i, mode in enumerate(row_modes) if modes[mode][1] == 0][: g.bf16_check]
    if generator is not target and greedy:
        check, redone = distill_data.compare_precision(
            target, [encoded[i] for i in greedy], [answers[i] for i in greedy], max_new_tokens=g.max_new_tokens,
            eos_token_id=eos, pad_token_id=pad)
        for i, answer in zip(greedy, redone):
            answers[i] = answer
        check["stored"] = "the fp32 answers of these prompts; every other answer of the shard is bf16's"
        log.info("bf16 against fp32 on %d greedy prompts: %s", len(greedy), check)
    return answers, check


def shard_provenance(cfg: DictConfig, row_modes: list[str], modes: dict, precision: str, check: Optional[dict],
                     tick: float) -> dict:
    """A shard's manifest fields beyond the file's own: sampling counts, precision and its check, command, config,
    machine, date, seconds since `tick`."""
    config = OmegaConf.to_container(cfg, resolve=True)
    return dict(
        sampling={name: {"temperature": temperature, "answers": row_modes.count(name)}
                  for name, (_, temperature) in modes.items()},
        max_new_tokens=cfg.generate.max_new_tokens, batch_size=cfg.generate.batch_size, precision=precision,
        precision_check=check, command=" ".join(["python experiments/train_draft.py", *sys.argv[1:]]),
        config={key: config[key] for key in ("target", "seed", "threads", "pool", "corpus", "generate")},
        machine=corpus.machine(), date=corpus.now(), seconds=round(time.perf_counter() - tick, 1))


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


@dataclass(frozen=True)
class CorpusPart:
    """One part of the corpus the training reads: the pool's first turns (""), the self prompts (SELF) or the
    follow-ups (FOLLOWUPS); `categories` names the shards' category indices."""

    name: str
    directory: Path
    manifest: dict
    categories: tuple[str, ...] = CATEGORIES


def corpus_parts(cfg: DictConfig, run: Path, tokenizer) -> list[CorpusPart]:
    """The first-turn corpus, plus its self-prompt and multi-turn parts when they have shards and their `train`
    is set."""
    directory, manifest = open_run_corpus(cfg, run, tokenizer)
    parts = [CorpusPart("", directory, manifest)]
    own = directory / SELF
    if cfg.self_prompts.train and (own / corpus.MANIFEST).exists():
        part, problems = corpus.open_corpus(own, self_prompt_header(cfg, len(tokenizer)))
        for problem in problems:
            log.warning("corpus %s: %s; dropped", own, problem)
        if part["shards"]:
            parts.append(CorpusPart(SELF, own, part, ("self",)))
    if cfg.followups.train:
        followups, part = open_followups(cfg, run, tokenizer, manifest, create=False)
        if part is not None and part["shards"]:
            parts.append(CorpusPart(FOLLOWUPS, followups, part))
    return parts


def stage_teacher(cfg: DictConfig, run: Path, parts: list[CorpusPart], pad: int) -> None:
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


def load_data(cfg: DictConfig, run: Path, parts: list[CorpusPart]) -> dict:
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


def stage_vocab(cfg: DictConfig, run: Path, data: dict, eos: int) -> list[int]:
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


def make_trainee(cfg: DictConfig, run: Path, data: dict, vocab: list[int], pad: int) -> Trainee:
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


def stage_train(cfg: DictConfig, run: Path, data: dict, vocab: list[int], pad: int) -> torch.nn.Module:
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


def part_summary(part: CorpusPart) -> dict:
    """A corpus part's totals, where it is (relative to the repository when inside it), machines and precisions."""
    directory, shards = part.directory, part.manifest["shards"]
    return {"dir": str(directory.relative_to(REPO)) if directory.is_relative_to(REPO) else str(directory),
            **corpus.summary(part.manifest), "machines": sorted({e["machine"]["cpu"] for e in shards}),
            "precision": sorted({e["precision"] for e in shards})}


def stage_export(cfg: DictConfig, run: Path, draft: torch.nn.Module, data: dict, vocab_info: dict,
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
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    summary["weights_mb"] = round(sum(p.stat().st_size for p in out.glob("*.safetensors")) / 1e6, 2)
    (out / "training_summary.json").write_text(json.dumps(summary, indent=1))
    (out / "README.md").write_text(model_card(summary, draft))
    return out


STAGES = ("pool", "generate", "self_prompts", "followups", "teacher", "vocab", "train", "export")


def run_stages(cfg: DictConfig) -> None:
    unknown = sorted(set(cfg.stages) - set(STAGES))
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; the stages are {list(STAGES)}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run = cli.output_dir()
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


if __name__ == "__main__":
    cli.run_app(run_stages, "train_draft", {"train_draft_schema": TrainDraftSchema})
