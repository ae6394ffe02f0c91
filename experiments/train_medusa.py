"""Train Medusa heads for a target by self-distillation on its committed corpus (config: conf/train_medusa.yaml).

    python experiments/train_medusa.py export.dir=treespec/assets/smollm2-135m-medusa   # the built-in heads
    python experiments/train_medusa.py data.shards=2 train.max_steps=50               # a quick run

The target is teacher-forced over the corpus's first `data.shards` shards (its normed last hidden states and top-k
at every answer position, cached in the run directory, so a rerun with hydra.run.dir=<run> skips it), the heads
learn the target's distribution k+1 tokens ahead, and the held-out per-head agreement (the corpus's last
`data.heldout_shards` shards) goes into training_summary.json and the model card (treespec.training.medusa).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from treespec.app import cli
from treespec.training.medusa import TrainMedusaSchema, run


def main(cfg: DictConfig) -> None:
    """Teacher pass, training and export in the Hydra run directory."""
    run(OmegaConf.to_object(cfg), cli.output_dir())


if __name__ == "__main__":
    cli.run_app(main, "train_medusa", {"train_medusa_schema": TrainMedusaSchema})
