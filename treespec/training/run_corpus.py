"""The corpus a training run reads and appends to (treespec.eval.corpus is its format): where it lives, the headers of
its parts (the template pool's first turns, the self prompts in <corpus>/self, the follow-ups in <corpus>/turn2), and
opening them for the stages of treespec.training.corpus_stages and treespec.training.pipeline."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from treespec.eval import corpus
from treespec.eval.corpus import FOLLOWUPS, SELF
from treespec.eval.prompt_pool import CATEGORIES
from treespec.training import self_prompts
from treespec.training.config import TrainDraftSchema

log = logging.getLogger("train_draft")  # the name train_draft's log lines have always carried
REPO = Path(__file__).resolve().parents[2]  # the repository (corpus/<target> lives there)


def corpus_dir(cfg: TrainDraftSchema, run: Path) -> Path:
    """Where the corpus lives: corpus.dir (relative to the repository), else corpus/<target> in the repository
    for a built-in target name, else <run>/corpus (a target given as a path gets a corpus of its own run)."""
    if cfg.corpus.dir:
        path = Path(cfg.corpus.dir)
        return path if path.is_absolute() else REPO / path
    if "/" not in cfg.target and not Path(cfg.target).exists():
        return REPO / "corpus" / cfg.target
    return run / "corpus"


def corpus_header(cfg: TrainDraftSchema, vocab_size: int) -> dict:
    """What a corpus is made of; appending requires the same (modes are assigned by
    distill_data.assign_modes(pool size, modes, pool seed))."""
    # "treespec.training.prompt_pool..." (here and in followup_header) is where the pool's builder lived when the
    # committed corpora under corpus/ were made (it is treespec.eval.prompt_pool now). Their manifests carry these
    # strings and a corpus refuses to append under another header: keep them exactly as they are.
    return {"target": cfg.target, "target_files": corpus.target_files(cfg.target), "vocab_size": vocab_size,
            "id_dtype": corpus.id_dtype(vocab_size),
            "pool": {"builder": "treespec.training.prompt_pool.build_prompt_pool", "size": cfg.pool.size, "seed": cfg.seed},
            "modes": [{"name": m.name, "temperature": m.temperature, "weight": m.weight} for m in cfg.generate.modes]}


def open_run_corpus(cfg: TrainDraftSchema, run: Path, tokenizer) -> tuple[Path, dict]:
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


def followup_header(cfg: TrainDraftSchema, vocab_size: int) -> dict:
    """The multi-turn part's header: the corpus's, its pool marked as second turns after the first turns' answers."""
    header = corpus_header(cfg, vocab_size)
    header["pool"] = {**header["pool"], "turn": 2, "followup": "treespec.training.prompt_pool.followup",
                      "first_turn": "the target's answer in the parent corpus's shard of the same name"}
    return header


def open_followups(cfg: TrainDraftSchema, run: Path, tokenizer, first: dict, *, create: bool) -> tuple[Path, Optional[dict]]:
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


def self_prompt_header(cfg: TrainDraftSchema, vocab_size: int) -> dict:
    """The self-prompt part's header: the corpus's, its "pool" the request writer's settings."""
    s = cfg.self_prompts
    return {**corpus_header(cfg, vocab_size),
            "pool": {"builder": "treespec.training.self_prompts (the target writes the user turn)", "seed": cfg.seed,
                     "temperature": s.temperature, "max_query_tokens": s.max_query_tokens,
                     "screen": f"finished, >= {self_prompts.MIN_WORDS} words, no 8-word run of MT-Bench or HumanEval, "
                               "no repeat within the shard"}}


@dataclass(frozen=True)
class CorpusPart:
    """One part of the corpus the training reads: the pool's first turns (""), the self prompts (SELF) or the
    follow-ups (FOLLOWUPS); `categories` names the shards' category indices."""

    name: str
    directory: Path
    manifest: dict
    categories: tuple[str, ...] = CATEGORIES


def corpus_parts(cfg: TrainDraftSchema, run: Path, tokenizer) -> list[CorpusPart]:
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


def part_summary(part: CorpusPart) -> dict:
    """A corpus part's totals, where it is (relative to the repository when inside it), machines and precisions."""
    directory, shards = part.directory, part.manifest["shards"]
    return {"dir": str(directory.relative_to(REPO)) if directory.is_relative_to(REPO) else str(directory),
            **corpus.summary(part.manifest), "machines": sorted({e["machine"]["cpu"] for e in shards}),
            "precision": sorted({e["precision"] for e in shards})}
