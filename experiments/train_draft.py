"""Train a draft model for a target by self-distillation (config: conf/train_draft.yaml).

    python experiments/train_draft.py                                  # the default pair's draft
    python experiments/train_draft.py stages=[pool,generate] generate.max_hours=2   # only add to the corpus
    python experiments/train_draft.py stages=[pool,followups] generate.max_hours=1  # add second turns
    python experiments/train_draft.py stages=[self_prompts] generate.max_hours=1   # add requests the target writes
    python experiments/train_draft.py hydra.run.dir=outputs/train_draft/<run>   # resume that run

Stages (each skips work already on disk, so an interrupted run resumes where it stopped):
  pool      prompts.jsonl: a template prompt pool disjoint from MT-Bench/HumanEval, each with a sampling mode
  generate  the corpus (treespec.eval.corpus; in the repository, corpus/<target>/ for a built-in target):
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

The stages live in treespec.training (config: the schema; corpus_stages: pool, generate, self_prompts, followups;
pipeline: teacher, vocab, train, export and run_stages); this script is their Hydra entry point.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from treespec.app import cli
from treespec.training.config import TrainDraftSchema
from treespec.training.pipeline import run_stages


def main(cfg: DictConfig) -> None:
    """Run the stages on the composed config (as its TrainDraftSchema dataclass) in the Hydra run directory."""
    run_stages(OmegaConf.to_object(cfg), cli.output_dir())


if __name__ == "__main__":
    cli.run_app(main, "train_draft", {"train_draft_schema": TrainDraftSchema})
