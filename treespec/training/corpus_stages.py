"""The stages that make a draft's training corpus (experiments/train_draft.py runs them): the prompt pool, the
target's answers to it (generate), its second turns after its own first answers (followups) and requests it writes
itself (self_prompts), each appending shards to the corpus and resuming from what is there."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from tqdm import tqdm

from treespec.errors import ConfigError
from treespec.eval import corpus
from treespec.eval.corpus import SELF
from treespec.eval.data import encode_chat, encode_prompt, humaneval, mtbench
from treespec.eval.prompt_pool import CATEGORIES, build_prompt_pool, followup
from treespec.models import load_model, load_tokenizer
from treespec.training import distill_data, self_prompts
from treespec.training.config import TrainDraftSchema
from treespec.training.run_corpus import corpus_dir, log_holdings, mode_table, open_followups, open_run_corpus, self_prompt_header

log = logging.getLogger("train_draft")  # the name train_draft's log lines have always carried


def stage_pool(cfg: TrainDraftSchema, run: Path) -> list[dict]:
    path = run / "prompts.jsonl"
    if not path.exists():
        pool = build_prompt_pool(cfg.pool.size, seed=cfg.seed)
        modes = [distill_data.SamplingMode(m.name, m.temperature, m.weight) for m in cfg.generate.modes]
        chosen = distill_data.assign_modes(len(pool), modes, cfg.seed)
        rows = [{"text": p.text, "category": p.category, "mode": m.name} for p, m in zip(pool, chosen)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [json.loads(line) for line in path.read_text().splitlines()]


def resolve_precision(name: str, key: str = "generate.dtype") -> str:
    """A dtype key (generate, teacher or train) resolved: float32 or bfloat16 as given, or for auto bf16 where this
    CPU runs it fast."""
    if name == "auto":
        return "bfloat16" if corpus.cpu_has_fast_bf16() else "float32"
    if name not in ("float32", "bfloat16"):
        raise ConfigError(f"{key} must be auto, float32 or bfloat16, got '{name}'")
    return name


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


def stage_generate(cfg: TrainDraftSchema, run: Path, prompts: list[dict]) -> None:
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


def followup_prompt(tokenizer, row: dict, answer: np.ndarray, index: int, seed: int) -> list[int]:
    """A conversation's ids: the pool prompt, the target's own first answer (without its EOS), a follow-up."""
    text = tokenizer.decode(answer[:-1] if len(answer) and answer[-1] == tokenizer.eos_token_id else answer,
                            skip_special_tokens=True)
    return encode_chat(tokenizer, [{"role": "user", "content": row["text"]}, {"role": "assistant", "content": text},
                                   {"role": "user", "content": followup(row["category"], index, seed)}])


def stage_followups(cfg: TrainDraftSchema, run: Path, prompts: list[dict]) -> None:
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


def evaluation_texts() -> list[str]:
    """Every MT-Bench turn and HumanEval prompt: what training data must not share an 8-word run with."""
    return [turn for prompt in mtbench() for turn in prompt.turns] + [prompt.text for prompt in humaneval()]


def stage_self_prompts(cfg: TrainDraftSchema, run: Path) -> None:
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


def generators(cfg: TrainDraftSchema) -> tuple[torch.nn.Module, torch.nn.Module, str]:
    """(the target in fp32, the model that generates: the target or its bf16 copy, that precision's name)."""
    target = load_model(cfg.target)
    precision = resolve_precision(cfg.generate.dtype)
    return target, (target if precision == "float32" else copy.deepcopy(target).to(torch.bfloat16)), precision


def answer_prompts(cfg: TrainDraftSchema, generator, target, encoded: list[list[int]], row_modes: list[str],
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


def shard_provenance(cfg: TrainDraftSchema, row_modes: list[str], modes: dict, precision: str, check: Optional[dict],
                     tick: float) -> dict:
    """A shard's manifest fields beyond the file's own: sampling counts, precision and its check, command (the
    train_draft command line, from sys.argv), config, machine, date, seconds since `tick`."""
    config = dataclasses.asdict(cfg)
    return dict(
        sampling={name: {"temperature": temperature, "answers": row_modes.count(name)}
                  for name, (_, temperature) in modes.items()},
        max_new_tokens=cfg.generate.max_new_tokens, batch_size=cfg.generate.batch_size, precision=precision,
        precision_check=check, command=" ".join(["python experiments/train_draft.py", *sys.argv[1:]]),
        config={key: config[key] for key in ("target", "seed", "threads", "pool", "corpus", "generate")},
        machine=corpus.machine(), date=corpus.now(), seconds=round(time.perf_counter() - tick, 1))
